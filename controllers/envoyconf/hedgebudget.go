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

package envoyconf

import (
	_ "embed"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	luav3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/lua/v3"
	wasmfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tailcut/tailcut/controllers/plan"
)

// HedgeBudgetFilter names the listener's hedge account filter; the hedged
// route's metadata for it sits under the same name, where Lua's metadata()
// looks, and hedgebudget.lua keeps a request's commitment in dynamic
// metadata under it (FILTER there).
const HedgeBudgetFilter = "tailcut.hedge_budget"

// AttemptCountHeader is the response header in which Envoy says how many
// attempts a request took: the account filter reads it and removes it.
const AttemptCountHeader = "x-envoy-attempt-count"

//go:embed hedgebudget.lua
var hedgeBudgetLua string

// DefaultHedgeAccountModule is where tailcut's proxies find the hedge
// account's Proxy-Wasm module: `tailcut bootstrap --hedge-account-module`
// copies it there, beside the bootstrap.
const DefaultHedgeAccountModule = "/etc/envoy/hedge-account.wasm"

// HedgeAccountModuleFilter is the hedge account of tailcut's own listener,
// one filter for every policy: the Proxy-Wasm module built from
// controllers/envoyconf/hedgeaccount, read from module on the proxy. Unlike the Lua
// account it sees every stream end, so a request its client cancels gives back
// the hedges Envoy never sent. All workers share one VM id, so Envoy compiles
// the module once. A runtime error in the module reloads it (its accounts
// start empty) rather than failing requests.
func HedgeAccountModuleFilter(module string) *hcmv3.HttpFilter {
	return &hcmv3.HttpFilter{
		Name: HedgeBudgetFilter,
		ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&wasmfilterv3.Wasm{Config: &wasmv3.PluginConfig{
			Name:          HedgeBudgetFilter,
			FailurePolicy: wasmv3.FailurePolicy_FAIL_RELOAD,
			Vm: &wasmv3.PluginConfig_VmConfig{VmConfig: &wasmv3.VmConfig{
				VmId:    HedgeBudgetFilter,
				Runtime: "envoy.wasm.runtime.v8",
				Code: &corev3.AsyncDataSource{Specifier: &corev3.AsyncDataSource_Local{Local: &corev3.DataSource{
					Specifier: &corev3.DataSource_Filename{Filename: module},
				}}},
			}},
		}})},
	}
}

// HedgeBudgetHTTPFilter is the Lua hedge account under name, for the mesh:
// each policy's EnvoyFilter inserts its own (HedgeBudgetFilterFor), since
// EnvoyFilters of different policies cannot share one filter, and a Wasm
// module would need a way into the sidecars (Istio's WasmPlugin).
func HedgeBudgetHTTPFilter(name string) *hcmv3.HttpFilter {
	return &hcmv3.HttpFilter{
		Name: name,
		ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&luav3.Lua{
			DefaultSourceCode: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: hedgeBudgetLua}},
		})},
	}
}

// HedgeBudgetFilterFor names a policy's own hedge account filter ("ns/name").
func HedgeBudgetFilterFor(policy string) string { return HedgeBudgetFilter + "/" + policy }

// OwnedRoute is the metadata of a route tailcut renders in a mesh without an
// account (bypass, unhedged, hedging off), for the Lua account filter named
// filter: the filter removes the attempt count from its answers, as from the
// accounted route's, and leaves routes of others alone.
func OwnedRoute(filter string) *corev3.Metadata {
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{filter: {Fields: map[string]*structpb.Value{
		"owned": structpb.NewBoolValue(true),
	}}}}
}

// HedgeAccount is the hedged route's metadata for the account filter named
// filter: its policy's account and the account's terms. retries is the
// route's num_retries: where it exceeds the hedges (a mesh's failure
// retries), the account caps the attempts of every request it hedges.
func HedgeAccount(p plan.RoutePlan, filter string, retries int) *corev3.Metadata {
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{filter: {Fields: map[string]*structpb.Value{
		"retries":    structpb.NewNumberValue(float64(retries)),
		"account":    structpb.NewStringValue(p.Name),
		"ratio":      structpb.NewNumberValue(p.Budget.HedgeRatio()),
		"window":     structpb.NewNumberValue(plan.HedgeWindow.Seconds()),
		"hedges":     structpb.NewNumberValue(float64(p.Hedge.MaxHedges)),
		"late_below": structpb.NewNumberValue(plan.HedgeLateThreshold),
		"late_ms":    structpb.NewNumberValue(float64(p.Hedge.LateDelay().Milliseconds())),
	}}}}
}
