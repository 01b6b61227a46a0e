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

package xds

import (
	"strings"
	"unicode"
)

// Bounds on what a proxy says about itself that reaches a policy's status:
// its node id and the detail of a NACK. Any client of the xDS port sends
// them, and they are copied into conditions and events.
const (
	maxNodeID     = 128
	maxNackDetail = 1024
)

// peerText makes text a proxy sent fit for status: control and format
// characters (newlines, terminal escapes, bidirectional overrides) become
// spaces, runs of spaces one, and the result is cut to n bytes on a rune
// boundary, marked with "...".
func peerText(text string, n int) string {
	clean := strings.Join(strings.FieldsFunc(text, func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == unicode.ReplacementChar
	}), " ")
	if len(clean) <= n {
		return clean
	}
	cut := n - len("...")
	for cut > 0 && !isRuneStart(clean[cut]) {
		cut--
	}
	return clean[:cut] + "..."
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }
