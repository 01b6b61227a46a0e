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
	"bytes"
	"encoding/json"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"
)

// jsonOpts renders field names as in Envoy's documentation (snake_case).
var jsonOpts = protojson.MarshalOptions{UseProtoNames: true}

// MessagesYAML renders messages as one YAML list. Keys come out sorted, so the
// output is stable for equal messages.
func MessagesYAML[M proto.Message](msgs []M) ([]byte, error) {
	list := make([]json.RawMessage, 0, len(msgs))
	for _, m := range msgs {
		b, err := jsonOpts.Marshal(m)
		if err != nil {
			return nil, err
		}
		list = append(list, b)
	}
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(list); err != nil {
		return nil, err
	}
	return yaml.JSONToYAML(buf.Bytes())
}

// MessageYAML renders one message as YAML.
func MessageYAML(m proto.Message) ([]byte, error) {
	b, err := jsonOpts.Marshal(m)
	if err != nil {
		return nil, err
	}
	return yaml.JSONToYAML(b)
}

// MessageMap renders a message as the JSON object an Istio EnvoyFilter patch
// or an Envoy Gateway JSON patch takes as its value (snake_case names, as in
// Envoy's documentation).
func MessageMap(m proto.Message) (map[string]any, error) {
	b, err := jsonOpts.Marshal(m)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	return out, json.Unmarshal(b, &out)
}
