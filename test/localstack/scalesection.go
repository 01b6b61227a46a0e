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

import "strings"

// docs/benchmarks.md has two writers: make bench-tail writes the file and
// keeps what follows its hand-written reading; make bench-scale writes only
// between these markers, which sit at the end of the file.
const (
	ScaleBegin = "<!-- make bench-scale: begin -->"
	ScaleEnd   = "<!-- make bench-scale: end -->"
)

// ReplaceScaleSection puts section between the scale markers of doc,
// appending them when doc has none.
func ReplaceScaleSection(doc, section string) string {
	block := ScaleBegin + "\n" + strings.TrimRight(section, "\n") + "\n" + ScaleEnd + "\n"
	i, j := strings.Index(doc, ScaleBegin), strings.Index(doc, ScaleEnd)
	if i < 0 || j < i {
		if doc != "" && !strings.HasSuffix(doc, "\n\n") {
			doc = strings.TrimRight(doc, "\n") + "\n\n"
		}
		return doc + block
	}
	return doc[:i] + block + strings.TrimLeft(doc[j+len(ScaleEnd):], "\n")
}

// ScaleSection is doc's scale section with its markers, "" when it has none.
func ScaleSection(doc string) string {
	i, j := strings.Index(doc, ScaleBegin), strings.Index(doc, ScaleEnd)
	if i < 0 || j < i {
		return ""
	}
	return doc[i:j+len(ScaleEnd)] + "\n"
}
