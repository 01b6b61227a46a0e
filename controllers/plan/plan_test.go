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

package plan

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func testPlan(ns, svc string, port int32) RoutePlan {
	p, err := Build(Input{
		PolicyNamespace: ns, PolicyName: svc + "-hedge", Service: svc, Port: port,
		PathPrefix: "/", Methods: []string{"get", "HEAD"},
		Delay: 20 * time.Millisecond, MaxHedges: 1, RetryOn: []string{"reset", "connect-failure"},
		BudgetPercent: 5, MinConcurrency: 3,
		Endpoints: []Endpoint{{Address: "10.0.0.2", Port: 8080}, {Address: "10.0.0.1", Port: 8080}},
	})
	if err != nil {
		panic(err)
	}
	return p
}

func TestBuildNormalizes(t *testing.T) {
	p := testPlan("shop", "web", 80)
	if !slices.Equal(p.Match.Methods, []string{"GET", "HEAD"}) {
		t.Errorf("methods = %v", p.Match.Methods)
	}
	if !slices.Equal(p.Hedge.RetryOn, []string{"connect-failure", "reset"}) {
		t.Errorf("retryOn = %v", p.Hedge.RetryOn)
	}
	if p.Endpoints[0].Address != "10.0.0.1" {
		t.Errorf("endpoints not sorted: %v", p.Endpoints)
	}
}

func TestRouteTimeout(t *testing.T) {
	for _, tc := range []struct {
		delay  time.Duration
		hedges int32
		want   time.Duration
	}{
		// late delays 30ms, 30ms, 1.5s, 29ms (18.7ms x 1.5 = 28.05, rounded up to whole ms)
		{20 * time.Millisecond, 1, 15*time.Second + 40*time.Millisecond},
		{20 * time.Millisecond, 2, 15*time.Second + 80*time.Millisecond},
		{time.Second, 3, 15*time.Second + 3*1510*time.Millisecond},
		{18700 * time.Microsecond, 1, 15*time.Second + 39*time.Millisecond},
	} {
		h := &Hedge{Delay: tc.delay, MaxHedges: tc.hedges}
		if got := h.RouteTimeout(); got != tc.want {
			t.Errorf("RouteTimeout(delay %s, %d hedges) = %s, want %s", tc.delay, tc.hedges, got, tc.want)
		}
	}
}

func TestPrepareSetSortsAndSplitsHosts(t *testing.T) {
	web80, web8080, cart := testPlan("shop", "web", 80), testPlan("shop", "web", 8080), testPlan("shop", "cart", 7070)
	web8080.Name = "shop/web-admin"
	in := []RoutePlan{web8080, web80, cart}
	inHosts := slices.Clone(in[0].Hosts)

	out, err := PrepareSet(in)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, p := range out {
		order = append(order, p.Name)
	}
	if want := []string{"shop/cart-hedge", "shop/web-hedge", "shop/web-admin"}; !slices.Equal(order, want) {
		t.Errorf("order = %v, want %v", order, want)
	}
	// Portless names go to port 80; port 8080 keeps its own names.
	if !slices.Contains(out[1].Hosts, "web.shop") || !slices.Contains(out[1].Hosts, "web.shop:80") {
		t.Errorf("port 80 hosts = %v", out[1].Hosts)
	}
	if want := []string{"web.shop.svc.cluster.local:8080", "web.shop.svc:8080", "web.shop:8080"}; !slices.Equal(out[2].Hosts, want) {
		t.Errorf("port 8080 hosts = %v, want %v", out[2].Hosts, want)
	}
	// cart has no sibling: all of its six names stay.
	if len(out[0].Hosts) != 6 {
		t.Errorf("cart hosts = %v", out[0].Hosts)
	}
	if !slices.Equal(in[0].Hosts, inHosts) {
		t.Error("PrepareSet modified its input")
	}
}

func TestPrepareSetLowestPortWithout80(t *testing.T) {
	a, b := testPlan("shop", "web", 9090), testPlan("shop", "web", 8080)
	b.Name = "shop/web-b"
	out, err := PrepareSet([]RoutePlan{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if out[0].Port != 8080 || !slices.Contains(out[0].Hosts, "web.shop") {
		t.Errorf("the lowest port should keep the portless names: %+v", out[0])
	}
	if slices.Contains(out[1].Hosts, "web.shop") {
		t.Errorf("port 9090 kept a portless name: %v", out[1].Hosts)
	}
}

func TestPrepareSetErrors(t *testing.T) {
	web := testPlan("shop", "web", 80)
	other := web
	other.Name = "shop/other"
	if _, err := PrepareSet([]RoutePlan{web, other}); !errors.Is(err, ErrDuplicateTarget) {
		t.Errorf("same service port twice: %v", err)
	}
	if _, err := PrepareSet([]RoutePlan{web, web}); !errors.Is(err, ErrDuplicateName) {
		t.Errorf("same plan twice: %v", err)
	}
	// A plan whose only host another plan owns is left without hosts.
	a, b := testPlan("shop", "web", 80), testPlan("shop", "web", 8080)
	b.Name, b.Hosts = "shop/b", []string{"web.shop"}
	if _, err := PrepareSet([]RoutePlan{a, b}); !errors.Is(err, ErrNoHosts) {
		t.Errorf("plan without hosts: %v", err)
	}
	if out, err := PrepareSet(nil); err != nil || len(out) != 0 {
		t.Errorf("empty set: %v, %v", out, err)
	}
}

// TestHostsNeverCrossNamespaces is issue #12's defect 4: every plan claimed the
// bare name of its Service, so a policy in one namespace took the traffic
// that clients of another namespace's Service of the same name sent.
func TestHostsNeverCrossNamespaces(t *testing.T) {
	a, b := testPlan("aaa", "checkout", 80), testPlan("shop", "checkout", 80)
	set, err := PrepareSet([]RoutePlan{b, a})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range set {
		for _, h := range p.Hosts {
			if !strings.Contains(h, "."+p.Namespace) {
				t.Errorf("plan %s answers to %q, a name without its namespace", p.Name, h)
			}
		}
		if !slices.Contains(p.Hosts, "checkout."+p.Namespace) {
			t.Errorf("plan %s lost its own name checkout.%s: %v", p.Name, p.Namespace, p.Hosts)
		}
	}
}

// TestValidateRefusesWhatEnvoyWould: a plan holds only what the API admits,
// so that whatever passes Validate translates (FuzzPlanToEnvoy found a
// Service name that was not UTF-8, which Envoy's resources refuse).
func TestValidateRefusesWhatEnvoyWould(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*RoutePlan)
		want   error
	}{
		{"service not UTF-8", func(p *RoutePlan) { p.Service = "\xff" }, ErrNameInvalid},
		{"service upper case", func(p *RoutePlan) { p.Service = "Web" }, ErrNameInvalid},
		{"namespace with a dot", func(p *RoutePlan) { p.Namespace = "a.b" }, ErrNameInvalid},
		{"policy in another namespace", func(p *RoutePlan) { p.Name = "other/web-hedge" }, ErrNameInvalid},
		{"policy name with a space", func(p *RoutePlan) { p.Name = "shop/web hedge" }, ErrNameInvalid},
		{"unknown method", func(p *RoutePlan) { p.Match.Methods = []string{"GET", "TRACE"} }, ErrMethodUnknown},
		{"unknown retryOn", func(p *RoutePlan) { p.Hedge.RetryOn = []string{"sometimes"} }, ErrRetryOnUnknown},
		{"prefix with a query", func(p *RoutePlan) { p.Match.PathPrefix = "/a?b" }, ErrPathPrefix},
		{"prefix with a space", func(p *RoutePlan) { p.Match.PathPrefix = "/a b" }, ErrPathPrefix},
		{"prefix not UTF-8", func(p *RoutePlan) { p.Match.PathPrefix = "/\xff" }, ErrPathPrefix},
		{"prefix too long", func(p *RoutePlan) { p.Match.PathPrefix = "/" + strings.Repeat("a", 1024) }, ErrPathPrefix},
		{"budget above a fan-out's two copies", func(p *RoutePlan) { p.Budget.Percent = 201 }, ErrBudgetInvalid},
		{"budget 0", func(p *RoutePlan) { p.Budget.Percent = 0 }, ErrBudgetInvalid},
		{"affinity without a key", func(p *RoutePlan) {
			p.Affinity = &Affinity{HashOn: HashOnHeader, LoadBalancer: LoadBalancerRingHash, RingSize: 1024}
		}, ErrHashOnInvalid},
		{"affinity on a named path", func(p *RoutePlan) {
			p.Affinity = &Affinity{HashOn: HashOnPath, Name: "x", LoadBalancer: LoadBalancerRingHash, RingSize: 1024}
		}, ErrHashOnInvalid},
		{"affinity on the body", func(p *RoutePlan) {
			p.Affinity = &Affinity{HashOn: "body", Name: "x", LoadBalancer: LoadBalancerRingHash, RingSize: 1024}
		}, ErrHashOnInvalid},
		{"affinity with an unknown balancer", func(p *RoutePlan) { p.Affinity = &Affinity{HashOn: HashOnPath, LoadBalancer: "Random"} }, ErrLoadBalancerUnknown},
		{"ring too small", func(p *RoutePlan) {
			p.Affinity = &Affinity{HashOn: HashOnPath, LoadBalancer: LoadBalancerRingHash, RingSize: 8}
		}, ErrRingSize},
		{"ring with a table size", func(p *RoutePlan) {
			p.Affinity = &Affinity{HashOn: HashOnPath, LoadBalancer: LoadBalancerRingHash, RingSize: 1024, TableSize: 65537}
		}, ErrRingSize},
		{"maglev table not prime", func(p *RoutePlan) {
			p.Affinity = &Affinity{HashOn: HashOnPath, LoadBalancer: LoadBalancerMaglev, TableSize: 65536}
		}, ErrTableSize},
		{"maglev table too large", func(p *RoutePlan) {
			p.Affinity = &Affinity{HashOn: HashOnPath, LoadBalancer: LoadBalancerMaglev, TableSize: 5000101}
		}, ErrTableSize},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testPlan("shop", "web", 80)
			tc.mutate(&p)
			if err := p.Validate(); !errors.Is(err, tc.want) {
				t.Errorf("Validate() = %v, want %v", err, tc.want)
			}
		})
	}
	if err := testPlan("shop", "web", 80).Validate(); err != nil {
		t.Errorf("a plain plan: %v", err)
	}
	fanOut := testPlan("shop", "web", 80)
	fanOut.Budget.Percent = MaxBudgetPercent
	if err := fanOut.Validate(); err != nil {
		t.Errorf("a fan-out's 200%% budget: %v", err)
	}
	for _, a := range []Affinity{
		{HashOn: HashOnCookie, Name: "session", LoadBalancer: LoadBalancerRingHash, RingSize: 64},
		{HashOn: HashOnQueryParameter, Name: "key", LoadBalancer: LoadBalancerMaglev, TableSize: 5000011},
	} {
		p := testPlan("shop", "web", 80)
		p.Affinity = &a
		if err := p.Validate(); err != nil {
			t.Errorf("affinity %+v: %v", a, err)
		}
	}
}
