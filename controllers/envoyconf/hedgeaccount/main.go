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

// Command hedgeaccount is tailcut's hedge account on its own Envoy: a
// Proxy-Wasm module (ABI 0.2.1) that keeps each policy's hedges within its
// budget over every stretch of a window or more, in the data path.
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o hedge-account.wasm ./controllers/envoyconf/hedgeaccount
//
// Envoy's retry_budget does not bound hedges: a retry holds its place in the
// budget only while it waits out its back-off (1 ms on a hedged route), not
// while it runs. The account (account.go) counts, per policy and Envoy
// worker, the requests of the last 2 x Window + 1 seconds and the hedges
// committed to them; a request may be hedged only while, with its hedges,
// every stretch of Window+1 seconds or more keeps its hedges within Ratio of
// the requests of all its seconds but the first. Hedges are committed when the
// request arrives, since Envoy sends them later, and the ones Envoy did not
// send are given back when the stream ends: proxy_on_log runs for every
// stream, answered or reset by its client, and the stream's upstream attempt
// count says how many were sent. The Lua account (hedgebudget.lua), which
// the Istio publisher still uses, sees only answered requests: there a
// cancelled request keeps its commitment for as long as the account keeps
// its second (2 x window + 1 seconds).
//
// The ABI glue is abi_wasip1.go; on other platforms this package builds for
// its tests only.
package main

func main() {}
