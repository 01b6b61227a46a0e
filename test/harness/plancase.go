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

package harness

import (
	"os"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/tailcut/tailcut/controllers/plan"
)

// PlanCase is one translation case of controllers/envoyconf/testdata/in:
// plans in the IR's own spelling, and the listener they are served on.
type PlanCase struct {
	ListenerAddress string
	ListenerPort    uint32
	Plans           []plan.RoutePlan
}

// planCaseFile is the shape of a case file: RoutePlans as the IR spells them,
// except that hedge.delay is a duration string and hosts may be left out
// (they default to plan.ServiceHosts).
type planCaseFile struct {
	Options struct {
		ListenerAddress string `json:"listenerAddress"`
		ListenerPort    uint32 `json:"listenerPort"`
	} `json:"options"`
	Plans []CasePlan `json:"plans"`
}

// CasePlan is a RoutePlan as a case file spells it: hedge.delay is a
// duration string, and hosts may be left out.
type CasePlan struct {
	plan.RoutePlan `json:",inline"`
	Hedge          *struct {
		Delay     string   `json:"delay"`
		MaxHedges int32    `json:"maxHedges"`
		RetryOn   []string `json:"retryOn"`
	} `json:"hedge,omitempty"`
}

// Plan is the IR value, failing the test when it is not a valid one.
func (cp CasePlan) Plan(tb testing.TB, path string) plan.RoutePlan {
	tb.Helper()
	p := cp.RoutePlan
	if cp.Hedge != nil {
		d, err := time.ParseDuration(cp.Hedge.Delay)
		if err != nil {
			tb.Fatalf("%s: plan %s: %v", path, p.Name, err)
		}
		p.Hedge = &plan.Hedge{Delay: d, MaxHedges: cp.Hedge.MaxHedges, RetryOn: cp.Hedge.RetryOn}
	}
	if len(p.Hosts) == 0 {
		p.Hosts = plan.ServiceHosts(p.Service, p.Namespace, p.Port)
	}
	if err := p.Validate(); err != nil {
		tb.Fatalf("%s: plan %s is not a valid IR value: %v", path, p.Name, err)
	}
	return p
}

// LoadPlanCase reads a case file, failing the test on an unknown field or a
// plan that is not a valid IR value.
func LoadPlanCase(tb testing.TB, path string) PlanCase {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	var f planCaseFile
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		tb.Fatalf("%s: %v", path, err)
	}
	c := PlanCase{ListenerAddress: f.Options.ListenerAddress, ListenerPort: f.Options.ListenerPort}
	for _, cp := range f.Plans {
		c.Plans = append(c.Plans, cp.Plan(tb, path))
	}
	return c
}
