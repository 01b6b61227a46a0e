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
	"errors"
	"fmt"
	"math/rand"
	"strconv"
	"sync"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// Keys gives every GET a key in a header, as the clients of a cache send
// them: key-0 is the most requested, and key k is requested in proportion to
// (1+k)^-Exponent (a Zipf distribution), out of Count keys.
type Keys struct {
	Header   string
	Count    int
	Exponent float64
}

// DefaultZipfExponent is the default skew: with 10,000 keys the hottest 1%
// take 65% of the requests, the hottest 10% take 84%.
const DefaultZipfExponent = 1.1

func (k *Keys) check() error {
	var errs []error
	if k.Header == "" {
		errs = append(errs, errors.New("--key-header: need the header that carries the key"))
	}
	if k.Count < 1 {
		errs = append(errs, fmt.Errorf("--keys %d: need at least one key", k.Count))
	}
	// math/rand's Zipf takes exponents above 1 only.
	if !(k.Exponent > 1) || k.Exponent > 10 {
		errs = append(errs, fmt.Errorf("--zipf %v: the exponent must be above 1 and at most 10", k.Exponent))
	}
	return errors.Join(errs...)
}

// keyed wraps a targeter so that each target carries a key drawn from the
// distribution; seed makes a stream's keys repeatable. vegeta's workers call
// a targeter at once, so the draw is locked.
func (k *Keys) keyed(tr vegeta.Targeter, seed int64) vegeta.Targeter {
	var mu sync.Mutex
	zipf := rand.NewZipf(rand.New(rand.NewSource(seed)), k.Exponent, 1, uint64(k.Count-1))
	return func(t *vegeta.Target) error {
		if err := tr(t); err != nil {
			return err
		}
		mu.Lock()
		n := zipf.Uint64()
		mu.Unlock()
		t.Header = t.Header.Clone()
		t.Header.Set(k.Header, "key-"+strconv.FormatUint(n, 10))
		return nil
	}
}
