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
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tailcut/tailcut/controllers/plan"
	"github.com/tailcut/tailcut/test/harness"
)

// counter is a Counter a test reads.
type counter struct{ n int }

func (c *counter) Inc() { c.n++ }

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
	plans := harness.ManyPlans(t, 100)
	translations := &counter{}
	tr := NewTranslator(TranslateOptions{}, TranslatorCounters{Translations: translations})
	before := translations.n
	if _, err := tr.Translate(plans); err != nil {
		t.Fatal(err)
	}
	if got := translations.n - before; got != 100 {
		t.Fatalf("first translation of 100 plans: %d translated", got)
	}
	step := func(what string, want int) {
		t.Helper()
		before := translations.n
		res, err := tr.Translate(plans)
		if err != nil {
			t.Fatal(err)
		}
		if got := translations.n - before; got != want {
			t.Errorf("%s: %d policies translated, want %d", what, got, want)
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
