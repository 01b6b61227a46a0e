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

package verify

import (
	"context"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
)

// Event reasons of a recorded run.
const (
	ReasonVerifyPassed = "VerifyPassed"
	ReasonVerifyFailed = "VerifyFailed"
)

// maxEventMessage is the API server's limit on an Event's message.
const maxEventMessage = 1024

// Record writes the run's result as an Event on the policy, so that
// `kubectl describe hp` shows the last verification with its figures. It is
// created directly (not through a broadcaster, which sends in the background
// and can lose the Event of a process that exits right after).
func Record(ctx context.Context, c client.Client, p *tailcutv1alpha1.HedgePolicy, r *Report) error {
	typ, reason := corev1.EventTypeNormal, ReasonVerifyPassed
	if !r.Pass {
		typ, reason = corev1.EventTypeWarning, ReasonVerifyFailed
	}
	msg := r.Summary()
	if len(msg) > maxEventMessage {
		msg = msg[:maxEventMessage-3] + "..."
	}
	host, _ := os.Hostname()
	now := metav1.NewTime(time.Now())
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: p.Name + ".verify-", Namespace: p.Namespace},
		InvolvedObject: corev1.ObjectReference{
			APIVersion: tailcutv1alpha1.GroupVersion.String(), Kind: "HedgePolicy",
			Namespace: p.Namespace, Name: p.Name, UID: p.UID, ResourceVersion: p.ResourceVersion,
		},
		Reason: reason, Message: msg, Type: typ, Count: 1,
		FirstTimestamp: now, LastTimestamp: now,
		Source: corev1.EventSource{Component: "tailcut-verify", Host: host},
	}
	return c.Create(ctx, ev)
}

// addCore lets the verifier's client write Events.
func addCore(s *runtime.Scheme) error { return clientgoscheme.AddToScheme(s) }
