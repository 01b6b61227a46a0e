/*
Copyright 2026 The tailcut Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package localstack

import (
	"os"
	"strings"
)

// docs/benchmarks.md has several writers: make bench-tail writes the file and
// keeps what follows its hand-written reading; make bench-scale and make
// bench-loadgen write only between their own markers, which sit at the end of
// the file.
const (
	ScaleBegin = "<!-- make bench-scale: begin -->"
	ScaleEnd   = "<!-- make bench-scale: end -->"
)

func markers(target string) (begin, end string) {
	return "<!-- make " + target + ": begin -->", "<!-- make " + target + ": end -->"
}

// ReplaceSection puts section between the markers of the make target that
// writes it, appending them when doc has none.
func ReplaceSection(doc, target, section string) string {
	begin, end := markers(target)
	block := begin + "\n" + strings.TrimRight(section, "\n") + "\n" + end + "\n"
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		if doc != "" && !strings.HasSuffix(doc, "\n\n") {
			doc = strings.TrimRight(doc, "\n") + "\n\n"
		}
		return doc + block
	}
	return doc[:i] + block + strings.TrimLeft(doc[j+len(end):], "\n")
}

// ScaleSection is doc's scale section with its markers, "" when it has none.
func ScaleSection(doc string) string {
	i, j := strings.Index(doc, ScaleBegin), strings.Index(doc, ScaleEnd)
	if i < 0 || j < i {
		return ""
	}
	return doc[i:j+len(ScaleEnd)] + "\n"
}

// WriteSection rewrites the section of the make target in the Markdown file
// at path (ReplaceSection), creating the file when there is none.
func WriteSection(path, target, section string) error {
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	return os.WriteFile(path, []byte(ReplaceSection(string(old), target, section)), 0o644)
}
