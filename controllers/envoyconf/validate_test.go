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
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	"github.com/tailcut/tailcut/test/harness"
)

// readGolden parses testdata/out/<name>.<kind>.yaml into messages made by newMsg.
func readGolden[M proto.Message](t *testing.T, name, kind string, newMsg func() M) []M {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "out", name+"."+kind+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(j, &raw); err != nil {
		t.Fatal(err)
	}
	var out []M
	for _, r := range raw {
		m := newMsg()
		if err := protojson.Unmarshal(r, m); err != nil {
			t.Fatalf("%s.%s: %v", name, kind, err)
		}
		out = append(out, m)
	}
	return out
}

// staticBootstrap turns one golden case into a bootstrap Envoy can load
// without a control plane (staticBootstrapOf).
func staticBootstrap(t *testing.T, name string) *bootstrapv3.Bootstrap {
	t.Helper()
	return staticBootstrapOf(t, &Resources{
		Listeners: readGolden(t, name, "listeners", func() *listenerv3.Listener { return &listenerv3.Listener{} }),
		Routes:    readGolden(t, name, "routes", func() *routev3.RouteConfiguration { return &routev3.RouteConfiguration{} }),
		Clusters:  readGolden(t, name, "clusters", func() *clusterv3.Cluster { return &clusterv3.Cluster{} }),
		Endpoints: readGolden(t, name, "endpoints", func() *endpointv3.ClusterLoadAssignment { return &endpointv3.ClusterLoadAssignment{} }),
	})
}

// staticBootstrapOf is StaticBootstrap with the hedge account module built
// from the source.
func staticBootstrapOf(t *testing.T, res *Resources) *bootstrapv3.Bootstrap {
	t.Helper()
	b, err := StaticBootstrap(res, StaticOptions{AccountModule: harness.HedgeAccountModule(t)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGoldenEnvoyValidate loads every golden output into the real Envoy.
func TestGoldenEnvoyValidate(t *testing.T) {
	bin := harness.EnvoyBin(t)
	dir := t.TempDir()
	for _, name := range caseNames(t) {
		t.Run(name, func(t *testing.T) {
			b, err := MessageYAML(staticBootstrap(t, name))
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, name+".yaml")
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			harness.EnvoyValidate(t, bin, path)
		})
	}
}

// TestBootstrapEnvoyValidate loads the real bootstrap into Envoy.
func TestBootstrapEnvoyValidate(t *testing.T) {
	bin := harness.EnvoyBin(t)
	for name, opts := range map[string]BootstrapOptions{
		"in-cluster": {XDSAddress: "tailcut.tailcut-system.svc:18000", NodeID: "envoy-0"},
		"loopback":   {XDSAddress: "127.0.0.1:18000", NodeID: "test", AdminPort: 19000, ListenerPort: 10080},
		"ipv6":       {XDSAddress: "[::1]:18000", NodeID: "test"},
		"stats":      {XDSAddress: "tailcut.tailcut-system.svc:18000", NodeID: "envoy-0", StatsPort: 9902},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := Bootstrap(opts)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "bootstrap.yaml")
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			harness.EnvoyValidate(t, bin, path)
		})
	}
}
