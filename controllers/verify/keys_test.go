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
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// TestKeysFollowZipf draws 200,000 keys out of 1,000 with exponent 1.1 and
// compares the share of a few keys with the Zipf law, (1+k)^-1.1 over the sum
// of all 1,000 terms, within 5 standard deviations of a binomial count.
func TestKeysFollowZipf(t *testing.T) {
	k := &Keys{Header: "x-cache-key", Count: 1000, Exponent: 1.1}
	if err := k.check(); err != nil {
		t.Fatal(err)
	}
	base := get("http://proxy/", http.Header{"Host": {"web"}})
	tr := k.keyed(vegeta.NewStaticTargeter(base), 1)
	const draws = 200_000
	counts := map[int]int{}
	for range draws {
		var tgt vegeta.Target
		if err := tr(&tgt); err != nil {
			t.Fatal(err)
		}
		n, err := strconv.Atoi(strings.TrimPrefix(tgt.Header.Get("x-cache-key"), "key-"))
		if err != nil || n < 0 || n >= k.Count || tgt.Header.Get("Host") != "web" || tgt.URL != base.URL {
			t.Fatalf("target %+v: want key-0 to key-999 on the base target", tgt)
		}
		counts[n]++
	}
	if base.Header.Get("x-cache-key") != "" {
		t.Fatal("the keyed targeter wrote into the base target's headers")
	}
	var sum float64
	for i := range k.Count {
		sum += math.Pow(float64(1+i), -k.Exponent)
	}
	for _, key := range []int{0, 1, 9, 99} {
		p := math.Pow(float64(1+key), -k.Exponent) / sum
		want, sd := p*draws, math.Sqrt(draws*p*(1-p))
		t.Logf("key-%d: %d draws, the Zipf law gives %.0f", key, counts[key], want)
		if math.Abs(float64(counts[key])-want) > 5*sd {
			t.Errorf("key-%d drawn %d times, want %.0f ± %.0f", key, counts[key], want, 5*sd)
		}
	}
}
