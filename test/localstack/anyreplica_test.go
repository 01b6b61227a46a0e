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

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	compositev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/composite/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/envoyconf"
	"github.com/tailcut/tailcut/controllers/plan"
	"github.com/tailcut/tailcut/test/harness"
)

// The comparator's Envoy runs tailcut's configuration with the hedged
// cluster made a composite: first attempts to the ring-hash copy, hedges to
// a round-robin copy; Envoy accepts it.
func TestAnyReplicaProxyHedgesThroughAComposite(t *testing.T) {
	policy := &tailcutv1alpha1.HedgePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: PolicyName},
		Spec: tailcutv1alpha1.HedgePolicySpec{
			TargetRef: tailcutv1alpha1.TargetRef{Name: Service, Port: Port},
			Delay:     tailcutv1alpha1.Delay{Mode: tailcutv1alpha1.DelayModeStatic, Static: &metav1.Duration{Duration: 68 * time.Millisecond}},
			Affinity:  &tailcutv1alpha1.Affinity{HashOn: tailcutv1alpha1.HashOn{Header: cacheKeyHeader}},
		},
	}
	eps := []plan.Endpoint{{Address: "127.0.0.1", Port: 19101}, {Address: "127.0.0.1", Port: 19102}, {Address: "127.0.0.1", Port: 19103}}
	b, err := anyReplicaBootstrap(policy, 68*time.Millisecond, eps, harness.HedgeAccountModule(t), 19000, 19001)
	if err != nil {
		t.Fatal(err)
	}
	hedged := plan.ClusterName(Namespace, Service, Port)
	lb := map[string]string{}
	for _, c := range b.StaticResources.Clusters {
		lb[c.Name] = c.LbPolicy.String()
		if ct := c.GetClusterType(); ct != nil {
			var cfg compositev3.ClusterConfig
			if err := ct.TypedConfig.UnmarshalTo(&cfg); err != nil || ct.Name != compositeClusterType || len(cfg.Clusters) != 2 ||
				cfg.Clusters[0].Name != hedged+"-owner" || cfg.Clusters[1].Name != hedged+"-any" {
				t.Errorf("cluster %s: %s %v (%v), want the composite of %[1]s-owner and %[1]s-any", c.Name, ct.Name, &cfg, err)
			}
		}
	}
	want := map[string]string{hedged: "CLUSTER_PROVIDED", hedged + "-owner": "RING_HASH", hedged + "-any": "ROUND_ROBIN", plan.BypassClusterName(Namespace, Service, Port): "RING_HASH"}
	if fmt.Sprint(lb) != fmt.Sprint(want) {
		t.Errorf("clusters' load balancers %v, want %v", lb, want)
	}
	boot, err := envoyconf.MessageYAML(b)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(boot), "cluster: "+hedged+"\n") {
		t.Errorf("the hedged route does not go to the composite %s:\n%s", hedged, boot)
	}
	path := filepath.Join(t.TempDir(), "any-replica.yaml")
	if err := os.WriteFile(path, boot, 0o644); err != nil {
		t.Fatal(err)
	}
	harness.EnvoyValidate(t, harness.EnvoyBin(t), path)
}
