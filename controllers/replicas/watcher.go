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
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/go-logr/logr"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
)

// Watcher runs on the leader. It wakes the reconciler for the policies whose
// entries a report change moved, and deletes reports that expired (a replica
// that died without removing its own), which wakes their policies too.
type Watcher struct {
	Informers cache.Informers
	Client    client.Client
	Namespace string
	Replica   string
	TTL       time.Duration // as Counting's
	Clock     clock.WithTicker
	Log       logr.Logger

	events chan event.GenericEvent
}

// Events delivers a GenericEvent for each policy a report change concerns.
func (w *Watcher) Events() <-chan event.GenericEvent {
	if w.events == nil {
		w.events = make(chan event.GenericEvent, 1024)
	}
	return w.events
}

// NeedLeaderElection is true: only the leader writes status.
func (w *Watcher) NeedLeaderElection() bool { return true }

// Start watches reports until ctx ends.
func (w *Watcher) Start(ctx context.Context) error {
	if w.Clock == nil {
		w.Clock = clock.RealClock{}
	}
	w.Events()
	events := w.events
	inf, err := w.Informers.GetInformer(ctx, &corev1.ConfigMap{})
	if err != nil {
		return err
	}
	send := func(old, cur *corev1.ConfigMap) {
		for _, key := range w.moved(old, cur) {
			ev := event.GenericEvent{Object: &tailcutv1alpha1.HedgePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}}
			select {
			case events <- ev:
			case <-ctx.Done():
				return
			}
		}
	}
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { send(nil, asConfigMap(o)) },
		UpdateFunc: func(o, n any) { send(asConfigMap(o), asConfigMap(n)) },
		DeleteFunc: func(o any) { send(asConfigMap(o), nil) },
	})
	if err != nil {
		return err
	}
	defer func() { _ = inf.RemoveEventHandler(reg) }()
	ttl := cmpOr(w.TTL, 90*time.Second)
	t := w.Clock.NewTicker(ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
			w.expire(ctx, ttl)
		}
	}
}

// moved is the policies whose entries differ between two versions of a
// report (nil: absent), for reports of other replicas.
func (w *Watcher) moved(old, cur *corev1.ConfigMap) []k8stypes.NamespacedName {
	entries := func(cm *corev1.ConfigMap) map[string]PolicyReport {
		if !w.isReport(cm) {
			return nil
		}
		r, _, err := decode(cm)
		if err != nil || r.Replica == w.Replica {
			return nil
		}
		return r.Policies
	}
	before, after := entries(old), entries(cur)
	var keys []k8stypes.NamespacedName
	for k, a := range after {
		if b, ok := before[k]; !ok || b != a {
			keys = append(keys, splitKey(k))
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			keys = append(keys, splitKey(k))
		}
	}
	return keys
}

// expire deletes the other replicas' reports that were not renewed within ttl.
func (w *Watcher) expire(ctx context.Context, ttl time.Duration) {
	var l corev1.ConfigMapList
	if err := w.Client.List(ctx, &l, client.InNamespace(w.Namespace), client.HasLabels{ReportLabel}); err != nil {
		w.Log.Error(err, "unable to list the replicas' proxy reports")
		return
	}
	for i := range l.Items {
		cm := &l.Items[i]
		r, renewed, err := decode(cm)
		if err == nil && (r.Replica == w.Replica || w.Clock.Since(renewed) <= ttl) {
			continue
		}
		// Malformed or expired: its replica is gone, or wrote nonsense.
		if err := w.Client.Delete(ctx, cm, client.Preconditions{ResourceVersion: &cm.ResourceVersion}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			w.Log.Error(err, "unable to delete an expired proxy report", "configmap", cm.Name)
			continue
		}
		w.Log.Info("deleted an expired proxy report: its replica's proxies are no longer counted", "configmap", cm.Name, "renewed", renewed)
	}
}

func (w *Watcher) isReport(cm *corev1.ConfigMap) bool {
	return cm != nil && cm.Namespace == w.Namespace && cm.Labels[ReportLabel] != ""
}

func asConfigMap(o any) *corev1.ConfigMap {
	if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	cm, _ := o.(*corev1.ConfigMap)
	return cm
}

func splitKey(k string) k8stypes.NamespacedName {
	for i := 0; i < len(k); i++ {
		if k[i] == '/' {
			return k8stypes.NamespacedName{Namespace: k[:i], Name: k[i+1:]}
		}
	}
	return k8stypes.NamespacedName{Name: k}
}
