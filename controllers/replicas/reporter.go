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
	"bytes"
	"context"
	"encoding/json"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/go-logr/logr"
)

// Reporter writes this replica's report. It runs on every replica, the
// leader included (a leader that steps down becomes a reporting follower).
type Reporter struct {
	Client    client.Client
	Namespace string
	Replica   string
	// Owner, when set, is the replica's Pod: its report is garbage
	// collected with it.
	Owner  *metav1.OwnerReference
	Source StatusSource
	// Period is how often the report is checked for changes (default 1s);
	// RenewPeriod how often it is rewritten anyway (default 30s).
	Period, RenewPeriod time.Duration
	Clock               clock.WithTicker
	Log                 logr.Logger
}

// NeedLeaderElection is false: every replica reports its proxies.
func (r *Reporter) NeedLeaderElection() bool { return false }

// Start writes the report until ctx ends, then deletes it.
func (r *Reporter) Start(ctx context.Context) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	period, renew := cmpOr(r.Period, time.Second), cmpOr(r.RenewPeriod, 30*time.Second)
	var written []byte
	var writtenAt time.Time
	t := r.Clock.NewTicker(period)
	defer t.Stop()
	for {
		data, err := json.Marshal(NewReport(r.Replica, r.Source.Statuses()))
		if err != nil {
			return err
		}
		if now := r.Clock.Now(); !bytes.Equal(data, written) || now.Sub(writtenAt) >= renew {
			if err := r.write(ctx, data, now); err != nil {
				if ctx.Err() == nil {
					r.Log.Error(err, "unable to write this replica's proxy report; the leader counts its proxies from the last one", "configmap", reportName(r.Replica))
				}
			} else {
				written, writtenAt = data, now
			}
		}
		select {
		case <-ctx.Done():
			r.remove()
			return nil
		case <-t.C():
		}
	}
}

func (r *Reporter) write(ctx context.Context, data []byte, now time.Time) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: reportName(r.Replica)}}
	_, err := controllerutil.CreateOrUpdate(ctx, r.Client, cm, func() error {
		metav1.SetMetaDataLabel(&cm.ObjectMeta, ReportLabel, r.Replica)
		metav1.SetMetaDataAnnotation(&cm.ObjectMeta, renewedAnnotation, now.UTC().Format(time.RFC3339))
		if r.Owner != nil {
			cm.OwnerReferences = []metav1.OwnerReference{*r.Owner}
		}
		cm.Data = map[string]string{reportKey: string(data)}
		return nil
	})
	return err
}

// remove deletes the report of a replica that stops, so that the leader stops
// counting its proxies at once rather than when the report expires.
func (r *Reporter) remove() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: reportName(r.Replica)}}
	if err := r.Client.Delete(ctx, cm); err != nil && !apierrors.IsNotFound(err) {
		r.Log.Error(err, "unable to delete this replica's proxy report; the leader drops it when it expires", "configmap", cm.Name)
	}
}

func cmpOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
