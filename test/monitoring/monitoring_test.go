// Package monitoring checks COSI's Grafana dashboard and PrometheusRules (config/components/monitoring,
// rendered by the cosi chart too): the rules parse with Prometheus's own rule parser, every panel
// has a query on the dashboard's data source variable, and every metric they use is exported by a
// real controller, sidecar or driver, scraped after a claim and an access were provisioned.
package monitoring_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/localenv"
	"github.com/kube-cosi/cosi/dev/objects"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/test/e2e/framework"
)

var (
	fw   *framework.Framework
	env  *localenv.Env
	repo string
)

func TestMain(m *testing.M) {
	// Ceph RGW: the store whose driver reports bucket usage, so that the usage gauges have series.
	opts := localenv.Options{Metrics: true, LeaderElection: true, Store: localenv.StoreRGW}
	testenv.RunSystem(m, opts, func(_ context.Context, e *localenv.Env) error {
		fw, env = framework.New(e, localenv.DriverName, "monitoring"), e
		var err error
		repo, err = localenv.RepoRoot()
		return err
	})
}

// component is config/components/monitoring, which the chart links as files/monitoring.
func component(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo, "config", "components", "monitoring", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ruleGroups parses the PrometheusRule's spec with Prometheus's rule parser.
func ruleGroups(t *testing.T) *rulefmt.RuleGroups {
	t.Helper()
	var obj struct {
		Spec json.RawMessage `json:"spec"`
	}
	if err := yaml.Unmarshal(component(t, "prometheusrule.yaml"), &obj); err != nil {
		t.Fatal(err)
	}
	spec, err := yaml.JSONToYAML(obj.Spec)
	if err != nil {
		t.Fatal(err)
	}
	groups, errs := rulefmt.Parse(spec, false, model.UTF8Validation)
	for _, err := range errs {
		t.Errorf("prometheusrule.yaml: %v", err)
	}
	if groups == nil || len(groups.Groups) == 0 {
		t.Fatal("prometheusrule.yaml: no rule group")
	}
	return groups
}

// dashboard is the dashboard JSON, in the parts the test checks.
type dashboard struct {
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		Title      string     `json:"title"`
		Type       string     `json:"type"`
		Datasource datasource `json:"datasource"`
		Targets    []struct {
			Expr       string     `json:"expr"`
			Datasource datasource `json:"datasource"`
		} `json:"targets"`
	} `json:"panels"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

func readDashboard(t *testing.T) *dashboard {
	t.Helper()
	d := &dashboard{}
	if err := json.Unmarshal(component(t, "dashboard.json"), d); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	return d
}

// grafanaVars replaces Grafana's variables by values PromQL parses.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$driver", ".*")

// queries are every PromQL expression of the dashboard and the rules, by where they are.
func queries(t *testing.T) map[string]string {
	t.Helper()
	q := map[string]string{}
	for _, g := range ruleGroups(t).Groups {
		for _, r := range g.Rules {
			q["rule "+r.Alert+r.Record] = r.Expr
		}
	}
	for _, p := range readDashboard(t).Panels {
		for i, tg := range p.Targets {
			q["panel "+p.Title+" #"+string(rune('A'+i))] = grafanaVars.Replace(tg.Expr)
		}
	}
	return q
}

// TestRulesParse: Prometheus's rule parser accepts the rules (expressions, durations, templates of
// the annotations), and every alert says how bad it is and what it means.
func TestRulesParse(t *testing.T) {
	for _, g := range ruleGroups(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %s: needs a severity label and summary and description annotations", r.Alert)
			}
		}
	}
}

// TestDashboard: every panel has a query, and every panel and query reads the data source
// variable, so that the dashboard works with any Prometheus data source.
func TestDashboard(t *testing.T) {
	d := readDashboard(t)
	if !slices.ContainsFunc(d.Templating.List, func(v struct {
		Name  string `json:"name"`
		Type  string `json:"type"`
		Query any    `json:"query"`
	}) bool {
		return v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus"
	}) {
		t.Error("dashboard.json: no Prometheus data source variable named datasource")
	}
	if len(d.Panels) == 0 {
		t.Fatal("dashboard.json: no panel")
	}
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q: no query", p.Title)
		}
		if p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: data source %q, want the variable ${datasource}", p.Title, p.Datasource.UID)
		}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q: a query without an expression", p.Title)
			}
			if tg.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: a query with data source %q, want ${datasource}", p.Title, tg.Datasource.UID)
			}
		}
	}
	for where, q := range queries(t) {
		if _, err := parser.ParseExpr(q); err != nil {
			t.Errorf("%s: %v", where, err)
		}
	}
}

// usedMetrics are the metric names the expressions select, with where each is used.
func usedMetrics(t *testing.T) map[string][]string {
	t.Helper()
	used := map[string][]string{}
	for where, q := range queries(t) {
		expr, err := parser.ParseExpr(q)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
			vs, ok := node.(*parser.VectorSelector)
			if !ok {
				return nil
			}
			name := vs.Name
			for _, m := range vs.LabelMatchers {
				if m.Name == model.MetricNameLabel {
					name = m.Value
				}
			}
			if name == "" {
				t.Errorf("%s: a selector without a metric name: %s", where, vs)
			}
			used[name] = append(used[name], where)
			return nil
		})
	}
	return used
}

// scrape reads http://address/metrics and returns the names of its series (a histogram's
// _bucket, _sum and _count, a summary's _sum and _count).
func scrape(t *testing.T, address string, names map[string]bool) {
	t.Helper()
	resp, err := http.Get("http://" + address + "/metrics") //nolint:noctx // a test's one request
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("%s: %v", address, err)
	}
	for name, f := range families {
		names[name] = true
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			names[name+"_bucket"], names[name+"_sum"], names[name+"_count"] = true, true, true
		case dto.MetricType_SUMMARY:
			names[name+"_sum"], names[name+"_count"] = true, true
		}
	}
}

// TestMetricsExported provisions a claim and an access, lets a claim of invalid parameters fail
// (so that the error counters have series), and fails on any metric the rules or the dashboard
// use that neither the controller, the sidecar nor the driver exports.
func TestMetricsExported(t *testing.T) {
	ns := fw.Namespace(t)
	// A quota, so that the quota gauges have series too.
	class := fw.BucketClass(cosiapi.DeletionPolicyDelete, map[string]string{"maxSize": "1Mi", "maxObjects": "100"})
	bad := fw.BucketClass(cosiapi.DeletionPolicyDelete, map[string]string{"notAParameter": "x"})
	ac := fw.AccessClass(false)
	fw.Create(t, class, bad, ac)
	claim := framework.Claim(ns, class.Name)
	failing := framework.Claim(ns, bad.Name)
	fw.Create(t, claim, failing)
	access := framework.Access(ns, ac.Name, objects.ReadWrite, claim)
	fw.Create(t, access)
	fw.Provisioned(t, claim, access)
	fw.Event(t, failing, cosiapi.EventFailedCreateBucket)

	used := usedMetrics(t)
	testenv.Eventually(t, func() error {
		names := map[string]bool{}
		for _, c := range []*localenv.Component{env.Controller, env.Sidecar, env.Driver} {
			scrape(t, c.MetricsAddress, names)
		}
		var missing []string
		for name := range used {
			if !names[name] {
				missing = append(missing, name+" (used by "+strings.Join(used[name], ", ")+")")
			}
		}
		if len(missing) > 0 {
			sort.Strings(missing)
			return fmt.Errorf("exported by no COSI process: %s", strings.Join(missing, "; "))
		}
		return nil
	})
}
