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

import "testing"

func TestReplaceScaleSection(t *testing.T) {
	const block1 = ScaleBegin + "\n## Scale\nold\n" + ScaleEnd + "\n"
	const block2 = ScaleBegin + "\n## Scale\nnew\n" + ScaleEnd + "\n"
	for _, tc := range []struct{ name, doc, want string }{
		{"empty file", "", block2},
		{"appended after the tail benchmark", "# Tail\n## Reading\ntext\n", "# Tail\n## Reading\ntext\n\n" + block2},
		{"replaced in place, the rest kept", "# Tail\n\n" + block1 + "after\n", "# Tail\n\n" + block2 + "after\n"},
	} {
		if got := ReplaceSection(tc.doc, "bench-scale", "## Scale\nnew\n"); got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
	if got := ScaleSection("x\n" + block1 + "y"); got != block1 {
		t.Errorf("ScaleSection = %q, want %q", got, block1)
	}
	if got := ScaleSection("no markers"); got != "" {
		t.Errorf("ScaleSection without markers = %q, want empty", got)
	}
}
