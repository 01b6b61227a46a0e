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

package istio

import "github.com/tailcut/tailcut/controllers/plan"

// maxObjectName is a DNS subdomain's length, the bound on object names;
// maxLabelValue bounds a label's value.
const (
	maxObjectName = 253
	maxLabelValue = 63
)

// FilterName is the EnvoyFilter of a policy, in the policy's namespace. A
// policy's name may be as long as the EnvoyFilter's may; with the prefix a
// long one is cut and told apart by a hash (bounded).
func FilterName(policy string) string { return plan.Bounded("tailcut-"+policy, maxObjectName) }

// policyLabel is the value of LabelPolicy: the policy's name, or for a name
// longer than a label value may be, its start and a hash. The full name is
// in the AnnotationPolicy annotation.
func policyLabel(policy string) string { return plan.Bounded(policy, maxLabelValue) }
