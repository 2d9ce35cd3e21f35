package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/rest"
)

// procStats reads a process's CPU seconds (user + system) and peak and current RSS in MiB from
// /proc.
func procStats(pid int) (cpu, peakRSS, rss float64, err error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	// Fields after the command name (which may contain spaces) start after the last ')'.
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	const clockTicks = 100 // USER_HZ on Linux
	cpu = (utime + stime) / clockTicks
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmHWM:":
			peakRSS = kb / 1024
		case "VmRSS:":
			rss = kb / 1024
		}
	}
	return cpu, peakRSS, rss, nil
}

// metrics is a scrape of a Prometheus endpoint.
type metrics map[string]*dto.MetricFamily

func parseMetrics(r io.Reader) (metrics, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(r)
}

// scrapeHTTP reads http://address/metrics.
func scrapeHTTP(ctx context.Context, address string) (metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+address+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return parseMetrics(resp.Body)
}

// scrapeAPIServer reads the API server's /metrics.
func scrapeAPIServer(ctx context.Context, cfg *rest.Config) (metrics, error) {
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(cfg.Host, "/")+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return parseMetrics(resp.Body)
}

// sum adds the values of a counter, gauge or histogram count whose labels match all of want
// (a value "*" matches any; a key absent from want is not checked).
func (m metrics) sum(name string, want map[string]string) float64 {
	f, ok := m[name]
	if !ok {
		return 0
	}
	total := 0.0
	for _, metric := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range metric.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			if v != "*" && labels[k] != v {
				match = false
			}
		}
		if !match {
			continue
		}
		switch {
		case metric.Counter != nil:
			total += metric.GetCounter().GetValue()
		case metric.Gauge != nil:
			total += metric.GetGauge().GetValue()
		case metric.Histogram != nil:
			total += float64(metric.GetHistogram().GetSampleCount())
		}
	}
	return total
}

func conflicts(before, after metrics) float64 {
	sel := map[string]string{"code": "409"}
	return after.sum("apiserver_request_total", sel) - before.sum("apiserver_request_total", sel)
}

// percentile returns the p-th percentile (0-100) of d.
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// stat is a figure measured in several runs.
type stat struct {
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	Runs   []float64 `json:"runs"`
}

func summarize(values []float64) stat {
	s := slices.Clone(values)
	slices.Sort(s)
	if len(s) == 0 {
		return stat{}
	}
	median := s[len(s)/2]
	if len(s)%2 == 0 {
		median = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return stat{Median: median, Min: s[0], Max: s[len(s)-1], Runs: values}
}

// childCPU returns the CPU seconds used so far by this process's children, by command name
// (kube-apiserver, etcd, cosi-controller, ...), and by this process itself ("cosi-bench").
func childCPU() map[string]float64 {
	out := map[string]float64{}
	self := os.Getpid()
	if cpu, _, _, err := procStats(self); err == nil {
		out["cosi-bench"] = cpu
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(stat)
		open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || closing < 0 {
			continue
		}
		fields := strings.Fields(s[closing+2:])
		if ppid, _ := strconv.Atoi(fields[1]); ppid != self {
			continue
		}
		if cpu, _, _, err := procStats(pid); err == nil {
			out[s[open+1:closing]] += cpu
		}
	}
	return out
}
