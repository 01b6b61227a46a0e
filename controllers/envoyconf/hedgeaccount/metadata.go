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

package main

import (
	"encoding/binary"
	"math"
	"strconv"
)

// MetadataKey is the route metadata filter name the account's terms sit under
// (xds.HedgeBudgetFilter).
const MetadataKey = "tailcut.hedge_budget"

// TermsFromMetadata reads a route's metadata entry for MetadataKey, as Envoy's
// proxy_get_property serializes a map: a little-endian u32 count, then per
// pair the u32 sizes of key and value, then each key and value followed by a
// NUL byte. A string value is its bytes, a number an 8-byte little-endian
// float64. ok is false when the entry is not an account's complete terms (a
// route tailcut renders without an account, or an older operator's route
// during an upgrade): such requests pass unchanged.
func TermsFromMetadata(b []byte) (t Terms, ok bool) {
	if len(b) < 4 {
		return t, false
	}
	n := int(binary.LittleEndian.Uint32(b))
	if n < 0 || n > len(b)/8 || 4+8*n > len(b) {
		return t, false
	}
	var have int
	const (
		hAccount = 1 << iota
		hRatio
		hWindow
		hHedges
		hLateBelow
		hLateMs
		hAll = hAccount | hRatio | hWindow | hHedges | hLateBelow | hLateMs
	)
	retries := int64(-1)
	off := 4 + 8*n
	for i := range n {
		kl := int(binary.LittleEndian.Uint32(b[4+8*i:]))
		vl := int(binary.LittleEndian.Uint32(b[8+8*i:]))
		if kl < 0 || vl < 0 || off+kl+1+vl+1 > len(b) {
			return t, false
		}
		k, v := b[off:off+kl], b[off+kl+1:off+kl+1+vl]
		off += kl + 1 + vl + 1
		if string(k) == "account" {
			t.Account = string(v)
			have |= hAccount
			continue
		}
		f, isNum := number(v)
		if !isNum {
			continue
		}
		switch string(k) {
		case "ratio":
			t.Ratio, have = f, have|hRatio
		case "window":
			t.Window, have = int64(f), have|hWindow
		case "hedges":
			t.Hedges, have = int64(f), have|hHedges
		case "late_below":
			t.LateBelow, have = int64(f), have|hLateBelow
		case "late_ms":
			t.LateMs, have = int64(f), have|hLateMs
		case "retries":
			retries = int64(f)
		}
	}
	if have != hAll || t.Account == "" || t.Window < 1 || t.Hedges < 1 || t.Window > 3600 {
		return Terms{}, false
	}
	t.Retries = t.Hedges
	if retries >= 0 {
		t.Retries = retries
	}
	return t, true
}

// number decodes a metadata number: 8 bytes of a little-endian float64 (a
// Struct number_value). Envoy's YAML loader keeps a non-integral number in a
// static config (ratio: 0.05) as the string "0.05": take that too.
func number(b []byte) (float64, bool) {
	if len(b) == 8 {
		return math.Float64frombits(binary.LittleEndian.Uint64(b)), true
	}
	f, err := strconv.ParseFloat(string(b), 64)
	return f, err == nil
}
