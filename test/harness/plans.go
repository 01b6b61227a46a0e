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
	"fmt"
	"testing"
	"time"

	"github.com/tailcut/tailcut/controllers/plan"
)

// ManyPlans builds n valid hedged plans across n/10 namespaces, each with
// one endpoint of its own: the policy set of the translator's and the xDS
// server's scale tests.
func ManyPlans(t testing.TB, n int) []plan.RoutePlan {
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
