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

package replicas

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/go-logr/logr"

	"github.com/tailcut/tailcut/controllers/publish"
)

// Counting is the leader's publisher: its own xDS server, whose Status also
// counts the proxies that the other replicas' current reports name.
type Counting struct {
	publish.Publisher
	// Reader reads report ConfigMaps, from the manager's cache.
	Reader    client.Reader
	Namespace string
	// Replica is this replica, whose proxies the Publisher counts already.
	Replica string
	// TTL: a report not renewed for this long belongs to a replica that is
	// gone; it is not counted (default 90s, three renew periods).
	TTL   time.Duration
	Clock clock.PassiveClock
	Log   logr.Logger

	mu      sync.Mutex
	decoded map[string]decodedReport // by ConfigMap name
}

type decodedReport struct {
	resourceVersion string
	report          Report
	renewed         time.Time
}

// Status is the local server's status plus the other replicas'.
func (c *Counting) Status(key k8stypes.NamespacedName) publish.ProgramStatus {
	ps := c.Publisher.Status(key)
	if ps.Version == "" {
		return ps
	}
	for _, r := range c.current(context.Background()) {
		if pr, ok := r.Policies[key.String()]; ok {
			ps = add(ps, pr)
		}
	}
	return ps
}

// current is the other replicas' reports that are not expired.
func (c *Counting) current(ctx context.Context) []Report {
	var l corev1.ConfigMapList
	if err := c.Reader.List(ctx, &l, client.InNamespace(c.Namespace), client.HasLabels{ReportLabel}); err != nil {
		c.Log.Error(err, "unable to list the replicas' proxy reports; counting this replica's proxies only")
		return nil
	}
	now := c.clock().Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.decoded == nil {
		c.decoded = map[string]decodedReport{}
	}
	seen := map[string]bool{}
	var out []Report
	for i := range l.Items {
		cm := &l.Items[i]
		seen[cm.Name] = true
		d, ok := c.decoded[cm.Name]
		if !ok || d.resourceVersion != cm.ResourceVersion {
			r, renewed, err := decode(cm)
			if err != nil {
				c.Log.Error(err, "ignoring a malformed proxy report")
				continue
			}
			d = decodedReport{resourceVersion: cm.ResourceVersion, report: r, renewed: renewed}
			c.decoded[cm.Name] = d
		}
		if d.report.Replica == c.Replica || now.Sub(d.renewed) > c.ttl() {
			continue
		}
		out = append(out, d.report)
	}
	for name := range c.decoded {
		if !seen[name] {
			delete(c.decoded, name)
		}
	}
	return out
}

func (c *Counting) ttl() time.Duration { return cmpOr(c.TTL, 90*time.Second) }

func (c *Counting) clock() clock.PassiveClock {
	if c.Clock == nil {
		return clock.RealClock{}
	}
	return c.Clock
}

// Retire passes a policy's retirement on to the local server: a wrapper that
// hid it would turn every deletion into a removal, and a 404 for its clients.
func (c *Counting) Retire(ctx context.Context, key k8stypes.NamespacedName) error {
	if r, ok := c.Publisher.(publish.Retirer); ok {
		return r.Retire(ctx, key)
	}
	return c.Remove(ctx, key)
}

// Reconciled passes the reconciler's first-reconcile marks on to the local
// server, which waits for them before it serves.
func (c *Counting) Reconciled(key k8stypes.NamespacedName) {
	if w, ok := c.Publisher.(publish.SyncWaiter); ok {
		w.Reconciled(key)
	}
}
