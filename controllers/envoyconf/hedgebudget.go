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
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	wasmfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tailcut/tailcut/controllers/plan"
)

// HedgeBudgetFilter names the hedge account filter, its VM and plugin; the
// hedged route's metadata for it sits under the same name, where the module
// looks (controllers/envoyconf/hedgeaccount/src/terms.rs, METADATA_KEY).
const HedgeBudgetFilter = "tailcut.hedge_budget"

// DefaultHedgeAccountModule is where tailcut's proxies find the hedge
// account's Proxy-Wasm module: `tailcut bootstrap --hedge-account-module`
// copies it there, beside the bootstrap.
const DefaultHedgeAccountModule = "/etc/envoy/hedge-account.wasm"

// HedgeAccountModuleFilter is the hedge account of tailcut's own listener,
// one filter for every policy, read from the file module on the proxy.
func HedgeAccountModuleFilter(module string) *hcmv3.HttpFilter {
	return hedgeAccountFilter(&corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: module}})
}

// HedgeAccountInlineFilter is the hedge account with the module's bytes in
// the filter's config, for a mesh: istiod hands it to the sidecars with the
// rest of their listeners, so no sidecar fetches anything.
func HedgeAccountInlineFilter(module []byte) *hcmv3.HttpFilter {
	return hedgeAccountFilter(&corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: module}})
}

// hedgeAccountFilter runs the Proxy-Wasm module built from
// controllers/envoyconf/hedgeaccount. It sees every stream end, so a request
// its client cancels gives back the hedges Envoy never sent. All workers and
// listeners share one VM id, so Envoy compiles the module once. A runtime
// error in the module reloads it (its accounts start empty) rather than
// failing requests.
func hedgeAccountFilter(code *corev3.DataSource) *hcmv3.HttpFilter {
	return &hcmv3.HttpFilter{
		Name: HedgeBudgetFilter,
		ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&wasmfilterv3.Wasm{Config: &wasmv3.PluginConfig{
			Name:          HedgeBudgetFilter,
			FailurePolicy: wasmv3.FailurePolicy_FAIL_RELOAD,
			Vm: &wasmv3.PluginConfig_VmConfig{VmConfig: &wasmv3.VmConfig{
				VmId:    HedgeBudgetFilter,
				Runtime: "envoy.wasm.runtime.v8",
				Code:    &corev3.AsyncDataSource{Specifier: &corev3.AsyncDataSource_Local{Local: code}},
			}},
		}})},
	}
}

// HedgeAccount is the hedged route's metadata for the account filter: its
// policy's account and the account's terms (delay_ms and late_ms bound the
// band of durations by which it tells whether late hedges must wait:
// plan.HedgeLateThreshold). retries is the route's
// num_retries: where it exceeds the hedges (a mesh's failure retries), the
// account caps the attempts of every request it hedges.
func HedgeAccount(p plan.RoutePlan, retries int) *corev3.Metadata {
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{HedgeBudgetFilter: {Fields: map[string]*structpb.Value{
		"retries":    structpb.NewNumberValue(float64(retries)),
		"account":    structpb.NewStringValue(p.Name),
		"ratio":      structpb.NewNumberValue(p.Budget.HedgeRatio()),
		"window":     structpb.NewNumberValue(plan.HedgeWindow.Seconds()),
		"hedges":     structpb.NewNumberValue(float64(p.Hedge.MaxHedges)),
		"late_below": structpb.NewNumberValue(plan.HedgeLateThreshold),
		"late_ms":    structpb.NewNumberValue(float64(p.Hedge.LateDelay().Milliseconds())),
		"delay_ms":   structpb.NewNumberValue(float64((p.Hedge.Delay + time.Millisecond - 1).Milliseconds())),
	}}}}
}
