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
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"

	"github.com/tailcut/tailcut/controllers/plan"
	"github.com/tailcut/tailcut/test/harness"
)

// fuzzInput is one policy as the fuzzer writes it: the spec's fields, the
// delay an estimate gave and the endpoints, as raw as they come.
type fuzzInput struct {
	ns, name, svc, prefix string
	port                  int32
	methods, retryOn      uint8
	delay                 int64
	maxHedges             int32
	budget, minConc       int32
	endpoints             []byte
	// affinity picks spec.affinity: its low 3 bits the key (0: none), bit 3
	// Maglev, the high bits a table or ring size (fuzzSizes).
	affinity uint8
}

var (
	fuzzMethods = []string{"GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE", "get", "TRACE"}
	fuzzRetryOn = []string{"reset", "connect-failure", "refused-stream", "5xx", "gateway-error", "retriable-4xx", "envoy-ratelimited", "bogus"}
	fuzzHashOn  = []plan.HashSource{"", plan.HashOnHeader, plan.HashOnCookie, plan.HashOnQueryParameter, plan.HashOnPath, plan.HashOnPath, "body", plan.HashOnHeader}
	fuzzSizes   = []uint64{0, 64, 1024, 8388608, 65537, 251, 65536, 5000011, 8, 1 << 40, 4093, 2039, 1021, 509, 131071, 8388609}
)

// affinityOf is spec.affinity as the fuzzer picks it, valid or not.
func (in fuzzInput) affinityOf() *plan.Affinity {
	hashOn := fuzzHashOn[in.affinity&7]
	if hashOn == "" {
		return nil
	}
	a := &plan.Affinity{HashOn: hashOn, LoadBalancer: plan.LoadBalancerRingHash}
	if hashOn != plan.HashOnPath || in.affinity&7 == 5 { // 5: a path with a name, refused
		a.Name = "x-key"
	}
	size := fuzzSizes[in.affinity>>4]
	if in.affinity&8 != 0 {
		a.LoadBalancer, a.TableSize = plan.LoadBalancerMaglev, size
	} else {
		a.RingSize = size
	}
	return a
}

// planOf builds the plan the operator would: plan.Build, whose error means
// the input is refused (as it is in status), not a defect.
func (in fuzzInput) planOf() (plan.RoutePlan, error) {
	pick := func(set []string, bits uint8) []string {
		var out []string
		for i, s := range set {
			if bits&(1<<i) != 0 {
				out = append(out, s)
			}
		}
		return out
	}
	var eps []plan.Endpoint
	for i := 0; i+6 <= len(in.endpoints) && len(eps) < 16; i += 6 {
		b := in.endpoints[i:]
		addr := netip.AddrFrom4([4]byte{b[0], b[1], b[2], b[3]}).String()
		if b[0]&1 == 1 { // some IPv6
			addr = netip.AddrFrom16([16]byte{0xfd, b[1], b[2], b[3], 15: b[0]}).String()
		}
		eps = append(eps, plan.Endpoint{Address: addr, Port: int32(b[4])<<8 | int32(b[5])})
	}
	return plan.Build(plan.Input{
		PolicyNamespace: in.ns, PolicyName: in.name, Service: in.svc, Port: in.port,
		PathPrefix: in.prefix, Methods: pick(fuzzMethods, in.methods), Delay: time.Duration(in.delay),
		MaxHedges: in.maxHedges, RetryOn: pick(fuzzRetryOn, in.retryOn),
		BudgetPercent: in.budget, MinConcurrency: in.minConc, Endpoints: eps, Affinity: in.affinityOf(),
	})
}

var fuzzSeeds = []fuzzInput{
	{"shop", "cart", "cart", "/", 8080, 0b11, 0b11, int64(20 * time.Millisecond), 1, 5, 3, []byte{10, 0, 0, 1, 0x1f, 0x90, 11, 0, 0, 2, 0x1f, 0x90}, 0},
	{"a-b", "p", "svc-1", "/api/v1", 80, 0b1111111, 0b1111111, int64(time.Millisecond), 3, 50, 1000, []byte{1, 2, 3, 4, 0, 1}, 0},
	{"ns", "off", "s", "/x", 65535, 0b1, 0b1, 0, 1, 1, 1, nil, 0},
	{"ns", "long", "s", "/", 1, 0b1, 0b100, int64(10 * time.Second), 2, 10, 10, []byte{255, 255, 255, 255, 255, 255}, 0},
	{"ns", "bad", "s", "no-slash", 0, 0b10000000, 0b10000000, -5, 0, 0, 0, []byte{0}, 0},
	{"NS", "x", "Svc", "/a b", 8080, 0b100000000 >> 1, 0, int64(time.Hour), 99, 200, -1, []byte{}, 0},
	// A fan-out (two copies, a 200% budget), keyed by a header on a ring.
	{"shop", "fan", "search", "/", 8080, 0b11, 0b11, int64(time.Millisecond), 2, 200, 3, []byte{10, 0, 0, 3, 0x1f, 0x90}, 2<<4 | 1},
	// Maglev on the path, with its default table.
	{"shop", "objects", "objects", "/o/", 80, 0b1, 0b1, int64(35 * time.Millisecond), 1, 10, 3, []byte{10, 0, 0, 4, 0, 80}, 4<<4 | 8 | 4},
}

// FuzzPlanToEnvoy: every input the plan accepts translates into resources
// that pass their proto validation, with the hedge settings the plan holds.
// go test runs the seeds; make fuzz searches; TestFuzzSeedsEnvoyValidate
// loads the seeds' translations into the real Envoy.
func FuzzPlanToEnvoy(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s.ns, s.name, s.svc, s.prefix, s.port, s.methods, s.retryOn, s.delay, s.maxHedges, s.budget, s.minConc, s.endpoints, s.affinity)
	}
	f.Fuzz(func(t *testing.T, ns, name, svc, prefix string, port int32, methods, retryOn uint8, delay int64, maxHedges, budget, minConc int32, endpoints []byte, affinity uint8) {
		p, err := fuzzInput{ns, name, svc, prefix, port, methods, retryOn, delay, maxHedges, budget, minConc, endpoints, affinity}.planOf()
		if err != nil {
			return
		}
		res, err := Translate([]plan.RoutePlan{p}, TranslateOptions{})
		if err != nil {
			t.Fatalf("plan %+v was accepted but does not translate: %v", p, err)
		}
		if len(res.Routes) != 1 || len(res.Routes[0].VirtualHosts) != 1 || len(res.Clusters) != 2 || len(res.Endpoints) != 2 {
			t.Fatalf("plan %s: %d route configurations, %d clusters, %d load assignments", p.Name, len(res.Routes), len(res.Clusters), len(res.Endpoints))
		}
		hedged := res.Routes[0].VirtualHosts[0].Routes[1].GetRoute()
		rp := hedged.GetRetryPolicy()
		if p.Hedge == nil {
			if rp.GetNumRetries().GetValue() != 0 || hedged.GetHedgePolicy().GetHedgeOnPerTryTimeout() {
				t.Fatalf("plan %s without hedging: route retries %d, hedges %v", p.Name, rp.GetNumRetries().GetValue(), hedged.GetHedgePolicy())
			}
		} else {
			if rp.GetPerTryTimeout().AsDuration() != p.Hedge.Delay || rp.GetNumRetries().GetValue() != uint32(p.Hedge.MaxHedges) || !hedged.GetHedgePolicy().GetHedgeOnPerTryTimeout() {
				t.Fatalf("plan %s: per_try_timeout %s, num_retries %d, want %s and %d, hedged", p.Name, rp.GetPerTryTimeout().AsDuration(), rp.GetNumRetries().GetValue(), p.Hedge.Delay, p.Hedge.MaxHedges)
			}
		}
		for _, c := range res.Clusters {
			got := c.GetCircuitBreakers().GetThresholds()[0].GetRetryBudget().GetBudgetPercent().GetValue()
			if want := float64(min(p.Budget.Percent, 100)); got != want {
				t.Fatalf("plan %s, budget %d%%: cluster %s retry budget %v%%, want %v%% (Envoy takes at most 100)", p.Name, p.Budget.Percent, c.GetName(), got, want)
			}
			if hashed := c.GetLbPolicy() == clusterv3.Cluster_RING_HASH || c.GetLbPolicy() == clusterv3.Cluster_MAGLEV; hashed != (p.Affinity != nil) {
				t.Fatalf("plan %s, affinity %+v: cluster %s balances by %s", p.Name, p.Affinity, c.GetName(), c.GetLbPolicy())
			}
		}
		if p.Affinity != nil && len(hedged.GetHashPolicy()) != 1 {
			t.Fatalf("plan %s, affinity %+v: the hedged route has %d hash policies, want 1", p.Name, p.Affinity, len(hedged.GetHashPolicy()))
		}
	})
}

// TestFuzzSeedsEnvoyValidate loads the translation of every seed the plan
// accepts into the real Envoy.
func TestFuzzSeedsEnvoyValidate(t *testing.T) {
	bin := harness.EnvoyBin(t)
	var plans []plan.RoutePlan
	for _, s := range fuzzSeeds {
		if p, err := s.planOf(); err == nil {
			plans = append(plans, p)
		}
	}
	if len(plans) < 4 {
		t.Fatalf("only %d seeds make a plan; the sample would prove little", len(plans))
	}
	res, err := Translate(plans, TranslateOptions{ListenerAddress: "127.0.0.1", ListenerPort: 10000})
	if err != nil {
		t.Fatal(err)
	}
	b, err := MessageYAML(staticBootstrapOf(t, res))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "fuzz-seeds.yaml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	harness.EnvoyValidate(t, bin, path)
	t.Logf("%d plans from the fuzz seeds passed envoy --mode validate", len(plans))
}
