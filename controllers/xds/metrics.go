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

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metrics of the xDS server, on the controller-runtime registry (served on the
// manager's metrics endpoint).
var (
	pushesTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tailcut_xds_pushes_total",
		Help: "Snapshots with a new version handed to the xDS cache, to be pushed to every connected proxy.",
	})
	nacksTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tailcut_xds_nacks_total",
		Help: "xDS responses a proxy rejected, by resource type (LDS, RDS, CDS, EDS).",
	}, []string{"type"})
	pushedBytesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tailcut_xds_pushed_bytes_total",
		Help: "Bytes of xDS responses sent to proxies, by resource type (LDS, RDS, CDS, EDS). A type is sent whole (state of the world) when any of its resources changes.",
	}, []string{"type"})
	translationsTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tailcut_xds_translations_total",
		Help: "Policies translated into Envoy resources. A policy is translated again only when its plan changes.",
	})
	assembliesTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tailcut_xds_set_assemblies_total",
		Help: "Times the whole plan set was assembled into a snapshot. With the push debounce on, at most one per push attempt, whatever the number of policies published.",
	})
	connectedProxies = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tailcut_xds_connected_proxies",
		Help: "Proxies with an open ADS stream.",
	})
)

func init() {
	metrics.Registry.MustRegister(pushesTotal, nacksTotal, pushedBytesTotal, translationsTotal, assembliesTotal, connectedProxies)
}

// shortType names a type URL the way Envoy's docs do.
func shortType(typeURL string) string {
	switch typeURL {
	case resourcev3.ListenerType:
		return "LDS"
	case resourcev3.RouteType:
		return "RDS"
	case resourcev3.ClusterType:
		return "CDS"
	case resourcev3.EndpointType:
		return "EDS"
	}
	return strings.TrimPrefix(typeURL, resourcev3.APITypePrefix)
}
