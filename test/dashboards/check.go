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

package dashboards

import (
	"context"
	"fmt"
	"strings"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// MayBeEmpty reports whether a query may return nothing in a healthy run: no
// NACK, no estimator error and no endpoint weighted down is the healthy state.
func MayBeEmpty(expr string) bool {
	return strings.Contains(expr, "nacks_total") || strings.Contains(expr, "estimate_errors_total") ||
		strings.Contains(expr, "tailcut_endpoint_weight")
}

// CheckQueries runs every query of the dashboards in dir as an instant query
// now, with values for Grafana's variables, and returns how many ran and one
// line per query that failed or, while traffic flows, returned no data.
func CheckQueries(ctx context.Context, api promv1.API, dir string, values map[string]string) (int, []string, error) {
	return CheckQueriesWhere(ctx, api, dir, values, func(Query) bool { return true })
}

// CheckQueriesWhere is CheckQueries for the queries keep selects: a stack
// that runs one data plane checks the queries that read it.
func CheckQueriesWhere(ctx context.Context, api promv1.API, dir string, values map[string]string, keep func(Query) bool) (int, []string, error) {
	ds, err := Load(dir)
	if err != nil {
		return 0, nil, err
	}
	ran := 0
	var failures []string
	for _, d := range ds {
		qs, err := d.Queries()
		if err != nil {
			return ran, failures, err
		}
		for _, q := range qs {
			if !keep(q) {
				continue
			}
			expr, problems := Substitute(q.Expr, d.VariableNames(), values)
			if len(problems) > 0 {
				failures = append(failures, fmt.Sprintf("%s: %s: %v", q.Dashboard, q.Where, problems))
				continue
			}
			v, _, err := api.Query(ctx, expr, time.Now())
			ran++
			if err != nil {
				failures = append(failures, fmt.Sprintf("%s: %s: %v\n  query: %s", q.Dashboard, q.Where, err, expr))
				continue
			}
			if vec, ok := v.(model.Vector); ok && len(vec) == 0 && !MayBeEmpty(expr) {
				failures = append(failures, fmt.Sprintf("%s: %s returned no data while traffic flowed\n  query: %s", q.Dashboard, q.Where, expr))
			}
		}
	}
	return ran, failures, nil
}

// PanelValue runs query refID of the panel titled title in the dashboard file
// (a file name in dir) as an instant query now, with values for Grafana's
// variables, and returns its single value and the query it ran.
func PanelValue(ctx context.Context, api promv1.API, dir, file, title, refID string, values map[string]string) (float64, string, error) {
	ds, err := Load(dir)
	if err != nil {
		return 0, "", err
	}
	for _, d := range ds {
		if d.File != file {
			continue
		}
		qs, err := d.Queries()
		if err != nil {
			return 0, "", err
		}
		for _, q := range qs {
			if q.Where != "panel "+title+" query "+refID {
				continue
			}
			expr, problems := Substitute(q.Expr, d.VariableNames(), values)
			if len(problems) > 0 {
				return 0, expr, fmt.Errorf("%s: %s: %v", file, q.Where, problems)
			}
			v, _, err := api.Query(ctx, expr, time.Now())
			if err != nil {
				return 0, expr, err
			}
			vec, ok := v.(model.Vector)
			if !ok || len(vec) != 1 {
				return 0, expr, fmt.Errorf("%s: %s returned %v, want one sample", file, q.Where, v)
			}
			return float64(vec[0].Value), expr, nil
		}
		return 0, "", fmt.Errorf("%s has no panel %q with query %s", file, title, refID)
	}
	return 0, "", fmt.Errorf("no dashboard %s in %s", file, dir)
}
