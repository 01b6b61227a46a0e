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

// Package replicas counts, in a policy's status, the proxies connected to
// every replica of the operator, not only to the leader. Each replica's xDS
// server knows only its own streams; every replica writes what its proxies
// took into a ConfigMap of its own (a report), and the leader, which writes
// status, adds the other replicas' reports to its own count.
package replicas

import (
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/tailcut/tailcut/controllers/publish"
)

const (
	// ReportLabel marks report ConfigMaps; its value is the replica's name.
	ReportLabel = "tailcut.io/proxy-report"
	// reportKey is the ConfigMap data key holding the report's JSON.
	reportKey = "report.json"
	// renewedAnnotation is when the replica last wrote its report (RFC 3339),
	// rewritten every RenewPeriod even when nothing changed: a report that is
	// not renewed belongs to a replica that is gone.
	renewedAnnotation = "tailcut.io/renewed"
)

// Report is what one replica's proxies took: for each policy the replica
// serves, the ProgramStatus its own xDS server computes. A replica with no
// proxy connected reports no policies.
type Report struct {
	Replica  string                  `json:"replica"`
	Policies map[string]PolicyReport `json:"policies,omitempty"` // by "namespace/name"
}

// PolicyReport is one policy on one replica.
type PolicyReport struct {
	Version    string `json:"version"`
	Connected  int32  `json:"connected"`
	Programmed int32  `json:"programmed,omitempty"`
	Serving    int32  `json:"serving,omitempty"`
	Rejected   string `json:"rejected,omitempty"`
}

// StatusSource is a replica's own xDS server.
type StatusSource interface {
	// Statuses is the ProgramStatus of every policy the server holds.
	Statuses() map[k8stypes.NamespacedName]publish.ProgramStatus
}

// NewReport is the report of a replica whose server reports statuses.
func NewReport(replica string, statuses map[k8stypes.NamespacedName]publish.ProgramStatus) Report {
	r := Report{Replica: replica}
	for key, ps := range statuses {
		if ps.Connected == 0 {
			continue
		}
		if r.Policies == nil {
			r.Policies = map[string]PolicyReport{}
		}
		r.Policies[key.String()] = PolicyReport{Version: ps.Version, Connected: ps.Connected, Programmed: ps.Programmed, Serving: ps.Serving, Rejected: ps.Rejected}
	}
	return r
}

// reportName is the ConfigMap of a replica's report.
func reportName(replica string) string { return "tailcut-proxies-" + replica }

// decode reads a report ConfigMap, and when it was last renewed.
func decode(cm *corev1.ConfigMap) (Report, time.Time, error) {
	var r Report
	if err := json.Unmarshal([]byte(cm.Data[reportKey]), &r); err != nil {
		return Report{}, time.Time{}, fmt.Errorf("report %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	renewed, err := time.Parse(time.RFC3339, cm.Annotations[renewedAnnotation])
	if err != nil {
		return Report{}, time.Time{}, fmt.Errorf("report %s/%s: renewed: %w", cm.Namespace, cm.Name, err)
	}
	return r, renewed, nil
}

// add counts a remote replica's view of a policy into the leader's. Its
// proxies are connected; they run the policy's current version only when the
// replica's version is the leader's (versions are content hashes, the same on
// every replica for the same plan). A replica still on an older version serves
// the policy but does not run the current version yet.
func add(ps publish.ProgramStatus, r PolicyReport) publish.ProgramStatus {
	ps.Connected += r.Connected
	ps.Serving += r.Serving
	if r.Version == ps.Version {
		ps.Programmed += r.Programmed
		if ps.Rejected == "" {
			ps.Rejected = r.Rejected
		}
	}
	return ps
}

// ReportSelector selects report ConfigMaps, for the manager's cache.
func ReportSelector() labels.Selector {
	req, err := labels.NewRequirement(ReportLabel, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant label key
	}
	return labels.NewSelector().Add(*req)
}
