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
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"

	"github.com/tailcut/tailcut/controllers/plan"
)

// scalePlans builds n valid plans across n/10 namespaces.
func scalePlans(t testing.TB, n int) []plan.RoutePlan {
	t.Helper()
	plans := make([]plan.RoutePlan, 0, n)
	for i := range n {
		p, err := plan.Build(plan.Input{
			PolicyNamespace: fmt.Sprintf("ns-%d", i/10), PolicyName: fmt.Sprintf("p-%d", i),
			Service: fmt.Sprintf("svc-%d", i), Port: 8080, PathPrefix: "/", Methods: []string{"GET"},
			Delay: 20 * time.Millisecond, MaxHedges: 1, RetryOn: []string{"reset"},
			BudgetPercent: 5, MinConcurrency: 3,
			Endpoints: []plan.Endpoint{{Address: fmt.Sprintf("10.0.%d.%d", i/250, i%250+1), Port: 9090}},
		})
		if err != nil {
			t.Fatal(err)
		}
		plans = append(plans, p)
	}
	return plans
}

// sameResources fails unless got equals a translation from scratch of the same
// plans, resource by resource and version by version.
func sameResources(t *testing.T, got *Resources, plans []plan.RoutePlan) {
	t.Helper()
	want, err := Translate(plans, TranslateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var g, w []validator
	_ = got.each(func(m validator) error { g = append(g, m); return nil })
	_ = want.each(func(m validator) error { w = append(w, m); return nil })
	if len(g) != len(w) {
		t.Fatalf("%d resources, a fresh translation has %d", len(g), len(w))
	}
	for i := range g {
		if !proto.Equal(g[i], w[i]) {
			t.Fatalf("resource %d (%s) differs from a fresh translation", i, g[i].ProtoReflect().Descriptor().Name())
		}
	}
	if got.Version() != want.Version() {
		t.Errorf("version %s, a fresh translation gives %s", got.Version(), want.Version())
	}
}

// TestTranslatorReusesUnchangedPolicies is issue #12's defect 10: every
// publish translated, validated and hashed every policy. A change to one of
// 100 policies must translate that one only, and give exactly what a
// translation from scratch gives.
func TestTranslatorReusesUnchangedPolicies(t *testing.T) {
	plans := scalePlans(t, 100)
	tr := newTranslator(TranslateOptions{})
	before := testutil.ToFloat64(translationsTotal)
	if _, err := tr.translate(plans); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(translationsTotal) - before; got != 100 {
		t.Fatalf("first translation of 100 plans: %v translated", got)
	}
	step := func(what string, want float64) {
		t.Helper()
		before := testutil.ToFloat64(translationsTotal)
		res, err := tr.translate(plans)
		if err != nil {
			t.Fatal(err)
		}
		if got := testutil.ToFloat64(translationsTotal) - before; got != want {
			t.Errorf("%s: %v policies translated, want %v", what, got, want)
		}
		sameResources(t, res, plans)
	}
	step("nothing changed", 0)
	plans[42].Hedge.Delay = 31 * time.Millisecond
	step("one delay changed", 1)
	plans[7].Endpoints = append(plans[7].Endpoints, plan.Endpoint{Address: "10.9.9.9", Port: 9090})
	plans[8].Hedge = nil
	step("one endpoint added, one policy unhedged", 2)
	plans = append(plans[:3], plans[4:]...)
	step("one policy removed", 0)

	// A sibling on port 80 of the same Service takes the portless host names
	// from the port-8080 plan: that plan's virtual host changes too.
	sibling := plans[0]
	sibling.Name, sibling.Port = sibling.Namespace+"/sibling", 80
	sibling.Hosts = plan.ServiceHosts(sibling.Service, sibling.Namespace, 80)
	plans = append(plans, sibling)
	step("a port-80 sibling joined", 2)
}

// TestPublishOneOfManyTranslatesOne checks the server keeps the translations:
// publishing a new delay for one of 100 policies translates one policy.
func TestPublishOneOfManyTranslatesOne(t *testing.T) {
	ctx := context.Background()
	s := NewServer(ServerOptions{Address: "127.0.0.1:0"})
	s.MarkSynced()
	plans := scalePlans(t, 100)
	for _, p := range plans {
		if err := s.Publish(ctx, nil, p); err != nil {
			t.Fatal(err)
		}
	}
	before := testutil.ToFloat64(translationsTotal)
	p := plans[10]
	p.Hedge.Delay = 44 * time.Millisecond
	if err := s.Publish(ctx, nil, p); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(translationsTotal) - before; got != 1 {
		t.Errorf("one delay change among 100 policies translated %v policies, want 1", got)
	}
}
