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

package localstack

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/envoyconf"
	"github.com/tailcut/tailcut/controllers/plan"
	"github.com/tailcut/tailcut/test/harness"
)

// ScaleOptions size a scale run: the real operator binary, a real API server
// and a real Envoy, with many Services and HedgePolicies.
type ScaleOptions struct {
	Dir        string // working directory: binaries, logs
	Policies   int    // Services, EndpointSlices and HedgePolicies, one each
	Namespaces int    // spread over this many namespaces
	Changes    int    // delay changes and endpoint changes measured, each
	Rest       time.Duration
	// PprofAddress, when set, is where the operator serves pprof profiles.
	PprofAddress string
	Log          func(format string, args ...any)
}

// ScaleResult is what a scale run measured.
type ScaleResult struct {
	Policies, Namespaces int
	// Created is how long creating the policies took; Programmed how long
	// from the first create until every policy was Programmed with Envoy's
	// ACK.
	Created, Programmed time.Duration
	// ApplyWrites is the API requests that write (POST, PUT, PATCH) the
	// operator sent from the first create until every policy was
	// Programmed; ApplyOperatorCPU and ApplyEnvoyCPU the CPU seconds the
	// operator and Envoy used meanwhile.
	ApplyWrites                     float64
	ApplyOperatorCPU, ApplyEnvoyCPU float64
	// DelayPush is, for each delay change, the time from the spec update to
	// Envoy's RDS update; RDSBytes the RDS bytes pushed per change.
	DelayPush []time.Duration
	RDSBytes  float64
	// EndpointPush is, for each EndpointSlice change made while Prometheus
	// accepted connections and never answered, the time until Envoy had the
	// new endpoint.
	EndpointPush []time.Duration
	// At rest, over Rest: the operator's RSS, CPU (cores) and Prometheus
	// queries per evaluation interval.
	RestRSSMiB, RestCPU, QueriesPerInterval float64
	Interval                                time.Duration
	// A full resync: the operator restarted with every policy in place. Ready
	// is when it served a complete snapshot again; RSS its peak; CPU seconds
	// used until then.
	ResyncReady                 time.Duration
	ResyncPeakRSSMiB, ResyncCPU float64
}

// scaleRun is a scale run on a local stack with a Fleet.
type scaleRun struct {
	*Stack
	scale ScaleOptions
	fleet *Fleet
}

// RunScale runs the scale measurements of issue #12.
func RunScale(ctx context.Context, opts ScaleOptions) (_ *ScaleResult, err error) {
	ports, err := ReservePorts()
	if err != nil {
		return nil, err
	}
	fleet := &Fleet{Services: opts.Policies, Namespaces: opts.Namespaces}
	stack, err := Start(ctx, Options{Dir: opts.Dir, Ports: ports, Log: opts.Log, Fleet: fleet, EnvoyConcurrency: 1, PprofAddress: opts.PprofAddress})
	if err != nil {
		return nil, err
	}
	defer stack.Stop()
	s := &scaleRun{Stack: stack, scale: opts, fleet: fleet}
	res := &ScaleResult{Policies: opts.Policies, Namespaces: opts.Namespaces, Interval: (&tailcutv1alpha1.HedgePolicySpec{}).EffectiveEvaluationInterval()}
	steps := []struct {
		name string
		run  func(context.Context, *ScaleResult) error
	}{
		{"apply", s.apply},
		{"delay changes", s.delayChanges},
		{"endpoint changes with Prometheus hung", s.endpointChanges},
		{"rest", s.rest},
		{"full resync", s.resync},
	}
	for _, st := range steps {
		s.logf("%s", st.name)
		if err := st.run(ctx, res); err != nil {
			return nil, fmt.Errorf("%s: %w (logs in %s)", st.name, err, filepath.Join(opts.Dir, "logs"))
		}
	}
	return res, nil
}

func (f *Fleet) ns(i int) string  { return fmt.Sprintf("scale-%d", i%f.Namespaces) }
func (f *Fleet) svc(i int) string { return fmt.Sprintf("svc-%d", i) }

// endpointIP is the address of a Service's j-th endpoint. Envoy never
// connects: no request is sent.
func endpointIP(i, j int) string { return fmt.Sprintf("10.%d.%d.%d", 1+i/250, i%250, 1+j) }

func (f *Fleet) slice(i, endpoints int) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: f.ns(i), Name: f.svc(i) + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: f.svc(i)}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](9090)}},
	}
	for j := range endpoints {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{endpointIP(i, j)}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	return es
}

// createFleet creates the fleet's namespaces, and its Services with an
// EndpointSlice of two endpoints each.
func (s *Stack) createFleet(ctx context.Context) error {
	f := s.opts.Fleet
	s.logf("creating %d Services with EndpointSlices in %d namespaces", f.Services, f.Namespaces)
	for n := range f.Namespaces {
		if err := s.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns(n)}}); err != nil {
			return err
		}
	}
	return parallel(f.Services, func(i int) error {
		// Headless: the API server would run out of cluster IPs for 1,000.
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: f.ns(i), Name: f.svc(i)},
			Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone,
				Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
		}
		if err := s.Client.Create(ctx, svc); err != nil {
			return err
		}
		return s.Client.Create(ctx, f.slice(i, 2))
	})
}

// parallel runs fn for 0..n-1 on 16 workers and returns the first error.
func parallel(n int, fn func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, 16)
	for w := range errs {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// policy is the i-th HedgePolicy: even ones Static, odd ones Auto (reading
// Envoy's histograms through the fake Prometheus, which has no data).
func (f *Fleet) policy(i int) *tailcutv1alpha1.HedgePolicy {
	p := &tailcutv1alpha1.HedgePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns(i), Name: f.svc(i)},
		Spec:       tailcutv1alpha1.HedgePolicySpec{TargetRef: tailcutv1alpha1.TargetRef{Name: f.svc(i), Port: 80}},
	}
	if i%2 == 0 {
		p.Spec.Delay.Mode = tailcutv1alpha1.DelayModeStatic
		p.Spec.Delay.Static = &metav1.Duration{Duration: 20 * time.Millisecond}
	}
	return p
}

func (s *scaleRun) apply(ctx context.Context, res *ScaleResult) error {
	writes, opCPU, envoyCPU, err := s.costs()
	if err != nil {
		return err
	}
	start := time.Now()
	if err := parallel(s.scale.Policies, func(i int) error { return s.Client.Create(ctx, s.fleet.policy(i)) }); err != nil {
		return err
	}
	res.Created = time.Since(start)
	if err := s.waitProgrammed(ctx, 5*time.Minute); err != nil {
		return err
	}
	res.Programmed = time.Since(start)
	w, o, e, err := s.costs()
	if err != nil {
		return err
	}
	res.ApplyWrites, res.ApplyOperatorCPU, res.ApplyEnvoyCPU = w-writes, o-opCPU, e-envoyCPU
	s.logf("created %d policies in %s, all Programmed after %s", s.scale.Policies, res.Created.Round(time.Millisecond), res.Programmed.Round(time.Millisecond))
	return nil
}

// waitProgrammed waits until every policy is Programmed, with Envoy's ACK.
func (s *scaleRun) waitProgrammed(ctx context.Context, timeout time.Duration) error {
	deadline, lastLog := time.Now().Add(timeout), time.Now()
	for {
		var list tailcutv1alpha1.HedgePolicyList
		if err := s.Client.List(ctx, &list); err != nil {
			return err
		}
		done := 0
		for _, p := range list.Items {
			if meta.IsStatusConditionTrue(p.Status.Conditions, tailcutv1alpha1.ConditionProgrammed) && p.Status.Proxies != nil && p.Status.Proxies.Programmed > 0 {
				done++
			}
		}
		if done == s.scale.Policies {
			return nil
		}
		if time.Since(lastLog) >= 5*time.Second {
			clusters, _ := s.envoyStat(`^cluster_manager\.active_clusters$`)
			s.logf("%d of %d policies Programmed; Envoy has %.0f clusters", done, s.scale.Policies, clusters)
			lastLog = time.Now()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d policies Programmed after %s", done, s.scale.Policies, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// delayChanges changes the delay of Static policies one at a time and times
// each from the update to Envoy's RDS update.
func (s *scaleRun) delayChanges(ctx context.Context, res *ScaleResult) error {
	const rdsUpdates = `^http\.` + envoyconf.StatPrefix + `\.rds\.` + envoyconf.RouteConfigName + `\.update_success$`
	bytesBefore, err := s.operatorMetricSum("tailcut_xds_pushed_bytes_total", `type="RDS"`)
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var last *tailcutv1alpha1.HedgePolicy
	for k := range s.scale.Changes {
		before, err := s.envoyStat(rdsUpdates)
		if err != nil {
			return err
		}
		p := s.fleet.policy(2 * rng.IntN(s.scale.Policies/2))
		if err := s.Client.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
			return err
		}
		base := p.DeepCopy()
		p.Spec.Delay.Static = &metav1.Duration{Duration: 21*time.Millisecond + time.Duration(k)*time.Millisecond}
		start := time.Now()
		if err := s.Client.Patch(ctx, p, client.MergeFrom(base)); err != nil {
			return err
		}
		if err := s.until(ctx, 30*time.Second, func() (bool, error) {
			n, err := s.envoyStat(rdsUpdates)
			return n > before, err
		}); err != nil {
			return fmt.Errorf("delay change %d: Envoy's routes: %w", k, err)
		}
		res.DelayPush = append(res.DelayPush, time.Since(start))
		last = p
	}
	bytesAfter, err := s.operatorMetricSum("tailcut_xds_pushed_bytes_total", `type="RDS"`)
	if err != nil {
		return err
	}
	res.RDSBytes = (bytesAfter - bytesBefore) / float64(s.scale.Changes)
	// The last change is in Envoy's routes, with its delay.
	dump, err := s.envoyGet("/config_dump?resource=dynamic_route_configs")
	if err != nil {
		return err
	}
	want := fmt.Sprintf(`"per_try_timeout": "%.3fs"`, last.Spec.Delay.Static.Seconds())
	if !strings.Contains(dump, want) {
		return fmt.Errorf("the routes Envoy holds have no %s after the last change", want)
	}
	return nil
}

// endpointChanges adds an endpoint to Services one at a time while
// Prometheus hangs, and times each until Envoy has it.
func (s *scaleRun) endpointChanges(ctx context.Context, res *ScaleResult) error {
	prom := s.FakePrometheus
	before := len(prom.Queries())
	prom.Answer(func(string) harness.PromReply { return harness.PromReply{Hang: true} })
	defer prom.Answer(nil)
	// Start once the sampler's queries hang.
	if err := s.until(ctx, time.Minute, func() (bool, error) { return len(prom.Queries()) > before, nil }); err != nil {
		return fmt.Errorf("the sampler sent no query to the hung Prometheus: %w", err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for k := range s.scale.Changes {
		i := rng.IntN(s.scale.Policies)
		es := s.fleet.slice(i, 0)
		if err := s.Client.Get(ctx, client.ObjectKeyFromObject(es), es); err != nil {
			return err
		}
		want := len(es.Endpoints) + 1
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{endpointIP(i, want-1)}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
		stat := `^cluster\.` + plan.ClusterName(s.fleet.ns(i), s.fleet.svc(i), 80) + `\.membership_healthy$`
		start := time.Now()
		if err := s.Client.Update(ctx, es); err != nil {
			return err
		}
		if err := s.until(ctx, 30*time.Second, func() (bool, error) {
			n, err := s.envoyStat(stat)
			return n == float64(want), err
		}); err != nil {
			return fmt.Errorf("endpoint change %d: %w", k, err)
		}
		res.EndpointPush = append(res.EndpointPush, time.Since(start))
	}
	return nil
}

// rest watches the operator with nothing changing.
func (s *scaleRun) rest(ctx context.Context, res *ScaleResult) error {
	pid := s.running("tailcut").PID()
	cpu0, err := cpuSeconds(pid)
	if err != nil {
		return err
	}
	q0 := len(s.FakePrometheus.Queries())
	start := time.Now()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(s.scale.Rest):
	}
	cpu1, err := cpuSeconds(pid)
	if err != nil {
		return err
	}
	wall := time.Since(start)
	res.RestCPU = (cpu1 - cpu0) / wall.Seconds()
	res.QueriesPerInterval = float64(len(s.FakePrometheus.Queries())-q0) / (wall.Seconds() / res.Interval.Seconds())
	rss, _, err := memory(pid)
	res.RestRSSMiB = rss
	return err
}

// resync restarts the operator with every policy in place.
func (s *scaleRun) resync(ctx context.Context, res *ScaleResult) error {
	if _, err := s.StopOperator(10 * time.Second); err != nil {
		return err
	}
	start := time.Now()
	if err := s.RestartOperator(ctx); err != nil {
		return err
	}
	res.ResyncReady = time.Since(start)
	p := s.running("tailcut")
	// Envoy reconnects and ACKs; the peak is reached by then.
	if err := s.waitProgrammed(ctx, 2*time.Minute); err != nil {
		return err
	}
	var err error
	if res.ResyncCPU, err = cpuSeconds(p.PID()); err != nil {
		return err
	}
	_, res.ResyncPeakRSSMiB, err = memory(p.PID())
	return err
}

func (s *scaleRun) until(ctx context.Context, timeout time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not reached within %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

func (s *scaleRun) envoyGet(path string) (string, error) {
	resp, err := http.Get("http://" + addr(s.opts.Ports.Admin) + path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("admin %s of Envoy: %s", path, resp.Status)
	}
	return string(b), err
}

// envoyStat reads one stat (a regex matching exactly one name); 0 when absent.
func (s *scaleRun) envoyStat(re string) (float64, error) {
	body, err := s.envoyGet("/stats?filter=" + urlQueryEscape(re))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(strings.TrimSpace(body), "\n") {
		if _, v, ok := strings.Cut(line, ": "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, nil
}

// costs is what the operator and Envoy spent so far: the operator's API
// writes, and both processes' CPU seconds.
func (s *scaleRun) costs() (writes, operatorCPU, envoyCPU float64, err error) {
	for _, method := range []string{"POST", "PUT", "PATCH"} {
		n, err := s.operatorMetricSum("rest_client_requests_total", `method="`+method+`"`)
		if err != nil {
			return 0, 0, 0, err
		}
		writes += n
	}
	if operatorCPU, err = cpuSeconds(s.running("tailcut").PID()); err != nil {
		return 0, 0, 0, err
	}
	envoyCPU, err = cpuSeconds(s.running("envoy").PID())
	return writes, operatorCPU, envoyCPU, err
}

// operatorMetricSum sums every series of a metric whose labels contain labels.
func (s *scaleRun) operatorMetricSum(name, labels string) (float64, error) {
	return metricSum(s.opts.Ports.Metrics, name, labels)
}

// metricSum sums every series of a metric, served in the Prometheus text
// format on a loopback port, whose labels contain labels.
func metricSum(port int, name, labels string) (float64, error) {
	resp, err := http.Get("http://" + addr(port) + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var sum float64
	for sc.Scan() {
		line := sc.Text()
		// A series with labels (name{...} v), or, when no labels are asked
		// for, one without (name v).
		if strings.HasPrefix(line, name+"{") && strings.Contains(line, labels) || labels == "" && strings.HasPrefix(line, name+" ") {
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				return 0, err
			}
			sum += v
		}
	}
	return sum, sc.Err()
}

func urlQueryEscape(s string) string {
	r := strings.NewReplacer(`\`, "%5C", "^", "%5E", "$", "%24", "+", "%2B", " ", "%20")
	return r.Replace(s)
}

// cpuSeconds is the CPU time a process used, from /proc. The kernel counts
// it in USER_HZ, which is 100 on Linux whatever the kernel's tick.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses.
	rest := string(b[strings.LastIndexByte(string(b), ')')+2:])
	f := strings.Fields(rest)
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100, errors.Join(err1, err2)
}

// memory is a process's resident set and its peak, in MiB.
func memory(pid int) (rss, peak float64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[0], 64)
		switch k {
		case "VmRSS":
			rss = kb / 1024
		case "VmHWM":
			peak = kb / 1024
		}
	}
	return rss, peak, nil
}

// Percentile is the q-quantile (0..1) of ds, nearest rank.
func Percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*q+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// Rows are the result as (measure, value) pairs, in a fixed order.
func (r *ScaleResult) Rows() [][2]string {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }
	return [][2]string{
		{"policies (Services, EndpointSlices) / namespaces", fmt.Sprintf("%d / %d", r.Policies, r.Namespaces)},
		{"creating every policy", ms(r.Created)},
		{"from the first create to every policy Programmed (Envoy ACK)", ms(r.Programmed)},
		{"meanwhile: the operator's API writes / its CPU / Envoy's CPU", fmt.Sprintf("%.0f / %.1f s / %.1f s", r.ApplyWrites, r.ApplyOperatorCPU, r.ApplyEnvoyCPU)},
		{fmt.Sprintf("delay change to Envoy's routes, p50 / p99 (%d changes)", len(r.DelayPush)), ms(Percentile(r.DelayPush, 0.5)) + " / " + ms(Percentile(r.DelayPush, 0.99))},
		{"RDS bytes pushed per delay change (one proxy)", fmt.Sprintf("%.0f", r.RDSBytes)},
		{fmt.Sprintf("endpoint change to Envoy, Prometheus hung, p50 / p99 (%d changes)", len(r.EndpointPush)), ms(Percentile(r.EndpointPush, 0.5)) + " / " + ms(Percentile(r.EndpointPush, 0.99))},
		{"operator at rest: RSS / CPU", fmt.Sprintf("%.0f MiB / %.3f cores", r.RestRSSMiB, r.RestCPU)},
		{fmt.Sprintf("Prometheus queries per evaluation interval (%s)", r.Interval), fmt.Sprintf("%.1f", r.QueriesPerInterval)},
		{"full resync (restart): ready with every policy served", ms(r.ResyncReady)},
		{"full resync: peak RSS / CPU until every policy Programmed", fmt.Sprintf("%.0f MiB / %.1f s", r.ResyncPeakRSSMiB, r.ResyncCPU)},
	}
}

// PrintTable writes the result as aligned text.
func (r *ScaleResult) PrintTable(w io.Writer) {
	for _, row := range r.Rows() {
		fmt.Fprintf(w, "%-72s %s\n", row[0], row[1])
	}
}
