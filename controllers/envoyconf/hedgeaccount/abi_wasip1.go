//go:build wasip1

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

// The Proxy-Wasm ABI 0.2.1, the part the account uses, written against the
// host directly: the Go SDK for Proxy-Wasm is not served by the module proxy
// this project builds from. Envoy calls, per stream, proxy_on_context_create,
// proxy_on_request_headers, (proxy_on_response_headers,) proxy_on_log,
// proxy_on_done and proxy_on_delete; a stream its client reset skips only the
// response.

import (
	"strconv"
	"unsafe"
)

const (
	statusOK          = 0
	mapRequestHeaders = 0
	logInfo           = 2
	actionContinue    = 0
)

//go:wasmimport env proxy_log
func proxyLog(level uint32, msg *byte, size uint32) uint32

//go:wasmimport env proxy_add_header_map_value
func proxyAddHeaderMapValue(mapType uint32, key *byte, keySize uint32, value *byte, valueSize uint32) uint32

//go:wasmimport env proxy_remove_header_map_value
func proxyRemoveHeaderMapValue(mapType uint32, key *byte, keySize uint32) uint32

//go:wasmimport env proxy_get_property
func proxyGetProperty(path *byte, pathSize uint32, retData unsafe.Pointer, retSize *uint32) uint32

//go:wasmimport env proxy_get_current_time_nanoseconds
func proxyGetCurrentTimeNanoseconds(ret *uint64) uint32

// The host copies each value it returns into memory it asks the module for
// (proxy_on_memory_allocate). Those copies live in arena, which every callback
// empties as it starts: nothing the host returns outlives the callback that
// asked for it, so reading the route's metadata on every request makes no
// garbage. A value larger than what is left gets a slice of its own.
var (
	arena     [64 << 10]byte
	arenaUsed uint32
)

//go:wasmexport proxy_on_memory_allocate
func proxyOnMemoryAllocate(size uint32) *byte {
	if size == 0 {
		size = 1
	}
	if arenaUsed+size <= uint32(len(arena)) {
		p := &arena[arenaUsed]
		arenaUsed += (size + 7) &^ 7
		return p
	}
	b := make([]byte, size)
	return &b[0]
}

// The host writes a returned value's (pointer, size) and the time into these.
// They are package variables: locals whose address goes to the host would
// escape to the heap on every call. The host writes a 4-byte address into
// retPtr, an 8-byte Go pointer, so retPtr is cleared before each call.
var (
	retPtr  *byte
	retSize uint32
	retTime uint64
)

func enter() { arenaUsed = 0 }

func property(path string) ([]byte, bool) {
	retPtr, retSize = nil, 0
	if proxyGetProperty(unsafe.StringData(path), uint32(len(path)), unsafe.Pointer(&retPtr), &retSize) != statusOK || retPtr == nil {
		return nil, false
	}
	return unsafe.Slice(retPtr, retSize), true
}

func addHeader(name, value string) {
	proxyAddHeaderMapValue(mapRequestHeaders, unsafe.StringData(name), uint32(len(name)), unsafe.StringData(value), uint32(len(value)))
}

func removeHeader(name string) {
	proxyRemoveHeaderMapValue(mapRequestHeaders, unsafe.StringData(name), uint32(len(name)))
}

func logf(msg string) { proxyLog(logInfo, unsafe.StringData(msg), uint32(len(msg))) }

func nowSeconds() int64 {
	proxyGetCurrentTimeNanoseconds(&retTime)
	return int64(retTime / 1e9)
}

// Property paths: segments separated by NUL bytes.
const (
	metadataPath = "xds\x00route_metadata\x00filter_metadata\x00" + MetadataKey
	attemptsPath = "upstream\x00request_attempt_count"
)

// clientHeaders are the request headers by which a client changes Envoy's
// retries; on an accounted route only the account sets them (an edge that
// trusts its peer would pass a client's on).
var clientHeaders = [...]string{"x-envoy-max-retries", "x-envoy-upstream-rq-per-try-timeout-ms",
	"x-envoy-retry-on", "x-envoy-retry-grpc-on", "x-envoy-hedge-on-per-try-timeout"}

var (
	accounts = NewAccounts()
	// streams holds the commitment of each stream that has one, from its
	// request headers to its end.
	streams = map[uint32]Commitment{}
)

//go:wasmexport proxy_abi_version_0_2_1
func proxyABIVersion() {}

//go:wasmexport proxy_on_vm_start
func proxyOnVMStart(rootID, vmConfigSize uint32) bool {
	enter()
	logf("tailcut hedge account: started")
	return true
}

//go:wasmexport proxy_on_configure
func proxyOnConfigure(rootID, configSize uint32) bool {
	enter()
	return true
}

//go:wasmexport proxy_on_context_create
func proxyOnContextCreate(contextID, parentID uint32) { enter() }

//go:wasmexport proxy_on_request_headers
func proxyOnRequestHeaders(contextID, numHeaders uint32, endOfStream bool) uint32 {
	enter()
	now := nowSeconds()
	accounts.Sweep(now)
	md, ok := property(metadataPath)
	if !ok {
		return actionContinue
	}
	terms, ok := TermsFromMetadata(md)
	if !ok {
		return actionContinue
	}
	for _, h := range clientHeaders {
		removeHeader(h)
	}
	grant, c := accounts.Admit(now, terms)
	switch {
	case grant.Hedges == 0:
		// No per-try timeout, so no hedge; the route's failure retries stay.
		addHeader("x-envoy-upstream-rq-per-try-timeout-ms", "0")
		return actionContinue
	case grant.Late:
		addHeader("x-envoy-upstream-rq-per-try-timeout-ms", strconv.FormatInt(terms.LateMs, 10))
	}
	if grant.CapRetries {
		addHeader("x-envoy-max-retries", strconv.FormatInt(grant.Hedges, 10))
	}
	streams[contextID] = c
	return actionContinue
}

//go:wasmexport proxy_on_log
func proxyOnLog(contextID uint32) {
	enter()
	c, ok := streams[contextID]
	if !ok {
		return
	}
	delete(streams, contextID)
	var attempts int64
	if b, ok := property(attemptsPath); ok && len(b) == 8 {
		attempts = int64(uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
			uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56)
	}
	c.Settle(attempts)
}

//go:wasmexport proxy_on_done
func proxyOnDone(contextID uint32) bool { return true }

//go:wasmexport proxy_on_delete
func proxyOnDelete(contextID uint32) {
	enter()
	// A stream whose log never ran (Envoy tearing down) takes its
	// commitment with it.
	delete(streams, contextID)
}
