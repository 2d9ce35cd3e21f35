// Package install tests what admins install: config/default and config/driver/s3 (kustomize) and
// charts/cosi and charts/cosi-driver (Helm). Both renderings must be the same objects (one cannot
// drift from the other), and a real kube-apiserver must accept them, with Pod Security
// "restricted" enforced on the namespace. charts/versitygw, the example store, is checked the same
// way, and its README's install commands run (versitygw_test.go).
package install

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// namespace is where config/default and config/driver/s3 install, and where the tests install the
// charts.
const namespace = "cosi-system"

// A pair is one installation rendered both ways, with the Helm values that make it the same as
// the kustomization.
type pair struct {
	name string
	// kustomization is a directory relative to the repository root, or an absolute one.
	kustomization  string
	chart, release string
	helmArgs       []string
	// kustomizeOnly are the objects ("Kind/name") only the kustomization has, and why.
	kustomizeOnly map[string]string
}

func pairs(t *testing.T) []pair {
	return []pair{{
		name:          "controller",
		kustomization: "config/default",
		chart:         "charts/cosi", release: "cosi",
		kustomizeOnly: map[string]string{
			"Namespace/" + namespace: "Helm installs into --namespace, which the admin creates and labels first",
		},
	}, {
		name:          "controller with a ServiceMonitor",
		kustomization: overlay(t, "config/components/servicemonitor"),
		chart:         "charts/cosi", release: "cosi",
		helmArgs: []string{"--set", "metrics.serviceMonitor.enabled=true"},
		kustomizeOnly: map[string]string{
			"Namespace/" + namespace: "Helm installs into --namespace, which the admin creates and labels first",
		},
	}, {
		name:          "controller with the v1alpha1 Bucket view",
		kustomization: overlay(t, "config/components/v1alpha1-bucket-view"),
		chart:         "charts/cosi", release: "cosi",
		helmArgs: []string{"--set", "v1alpha1BucketView.enabled=true"},
		kustomizeOnly: map[string]string{
			"Namespace/" + namespace: "Helm installs into --namespace, which the admin creates and labels first",
		},
	}, {
		name:          "S3 driver",
		kustomization: "config/driver/s3",
		chart:         "charts/cosi-driver", release: "s3",
	}}
}

// overlay writes an overlay of config/default with components (paths relative to the repository),
// as docs/install.md tells admins to.
func overlay(t *testing.T, components ...string) string {
	dir := filepath.Join(t.TempDir(), "overlay")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	rel := func(p string) string {
		r, err := filepath.Rel(dir, filepath.Join(env.RepoRoot, p))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	k := fmt.Sprintf(
		"apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- %s\ncomponents:\n",
		rel("config/default"),
	)
	for _, c := range components {
		k += fmt.Sprintf("- %s\n", rel(c))
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestRenderingsAgree renders each installation with kustomize and with Helm (default values) and
// compares every object: kinds, names, RBAC rules, Deployments' containers, args, env, probes,
// securityContext. Only Helm's own labels differ.
func TestRenderingsAgree(t *testing.T) {
	for _, p := range pairs(t) {
		t.Run(p.name, func(t *testing.T) {
			kustomized := index(t, kustomize(t, p.kustomization))
			helmed := index(t, helmTemplate(t, p.chart, p.release, p.helmArgs...))
			for key, why := range p.kustomizeOnly {
				if _, ok := kustomized[key]; !ok {
					t.Errorf("%s: expected %s (%s), not rendered", p.kustomization, key, why)
				}
				delete(kustomized, key)
			}
			for _, key := range sortedKeys(kustomized, helmed) {
				k, inK := kustomized[key]
				h, inH := helmed[key]
				switch {
				case !inH:
					t.Errorf("%s renders %s, %s does not", p.kustomization, key, p.chart)
				case !inK:
					t.Errorf("%s renders %s, %s does not", p.chart, key, p.kustomization)
				default:
					if d := diff(t, k, h); d != "" {
						t.Errorf("%s differs (- %s, + %s):\n%s", key, p.kustomization, p.chart, d)
					}
				}
			}
		})
	}
}

// TestRBACFromGeneratedRoles checks that both renderings grant exactly the generated roles of
// config/rbac: the chart reads them through files/ links, kustomize through config/rbac. One
// change is made to the sidecar's Role, the same both ways (ownLease): its Lease rights are its
// own Lease's.
func TestRBACFromGeneratedRoles(t *testing.T) {
	for _, c := range []struct{ role, chart, release, prefix string }{
		{"config/rbac/controller/role.yaml", "charts/cosi", "cosi", ""},
		{"config/rbac/sidecar/role.yaml", "charts/cosi-driver", "s3", "s3-"},
	} {
		data, err := os.ReadFile(filepath.Join(env.RepoRoot, c.role))
		if err != nil {
			t.Fatal(err)
		}
		generated := decode(t, data)
		rendered := index(t, helmTemplate(t, c.chart, c.release))
		if len(generated) == 0 {
			t.Fatalf("%s: no roles", c.role)
		}
		for _, g := range generated {
			key := g.GetKind() + "/" + c.prefix + g.GetName()
			r, ok := rendered[key]
			if !ok {
				t.Errorf("%s: %s from %s is not rendered", c.chart, key, c.role)
				continue
			}
			if c.chart == "charts/cosi-driver" && g.GetKind() == "Role" {
				ownLease(t, g, "s3.cosi.kube-cosi.io-cosi-sidecar")
			}
			if d := diff(t, g.Object["rules"], r.Object["rules"]); d != "" {
				t.Errorf("%s: rules of %s differ from %s (- generated, + rendered):\n%s", c.chart, key, c.role, d)
			}
		}
	}
}

// kustomize renders a kustomization with the kubectl of bin/.
func kustomize(t *testing.T, dir string) []byte {
	t.Helper()
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(env.RepoRoot, dir)
	}
	return run(t, filepath.Join(env.BinDir, "kubectl"), "kustomize", dir)
}

// helmTemplate renders a chart with the helm of bin/ (make helm) into namespace.
func helmTemplate(t *testing.T, chart, release string, args ...string) []byte {
	t.Helper()
	return helmTemplateIn(t, namespace, chart, release, args...)
}

func helmTemplateIn(t *testing.T, ns, chart, release string, args ...string) []byte {
	t.Helper()
	out, err := helm(
		append([]string{"template", release, filepath.Join(env.RepoRoot, chart), "--namespace", ns}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// helm runs the helm of bin/ (make helm).
func helm(args ...string) ([]byte, error) {
	bin := filepath.Join(env.RepoRoot, "bin", "helm")
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("%s: run `make helm` (make test does) to build it: %w", bin, err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes(), nil
}

func run(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes()
}

// decode splits a multi-document YAML stream into objects, skipping empty documents.
func decode(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		if len(m) > 0 {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
}

// index decodes a rendering into "Kind/name" → object, normalized: Helm's own labels removed.
// Every object must be unique by kind and name (namespaces are checked by the comparison).
func index(t *testing.T, data []byte) map[string]*unstructured.Unstructured {
	t.Helper()
	m := map[string]*unstructured.Unstructured{}
	for _, o := range decode(t, data) {
		key := o.GetKind() + "/" + o.GetName()
		if _, dup := m[key]; dup {
			t.Fatalf("%s rendered twice", key)
		}
		labels := o.GetLabels()
		for _, l := range helmLabels {
			delete(labels, l)
		}
		o.SetLabels(labels)
		annotations := o.GetAnnotations()
		delete(annotations, "helm.sh/resource-policy")
		if len(annotations) == 0 {
			annotations = nil // removes the field
		}
		o.SetAnnotations(annotations)
		m[key] = o
	}
	return m
}

// helmLabels are the labels only Helm sets: they say who manages the object, not what it is.
var helmLabels = []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/version"}

func sortedKeys(ms ...map[string]*unstructured.Unstructured) []string {
	seen := map[string]bool{}
	var keys []string
	for _, m := range ms {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	sort.Strings(keys)
	return keys
}

// diff returns a line diff of two values as YAML (keys sorted), or "" when they are equal.
func diff(t *testing.T, a, b any) string {
	t.Helper()
	ya, err := yaml.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	yb, err := yaml.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(ya, yb) {
		return ""
	}
	return lineDiff(strings.Split(string(ya), "\n"), strings.Split(string(yb), "\n"))
}

// lineDiff is a longest-common-subsequence diff: lines only in a ("-"), only in b ("+"), and
// three lines of context around each change.
func lineDiff(a, b []string) string {
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	type line struct {
		op   byte
		text string
	}
	var lines []line
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			lines = append(lines, line{' ', a[i]})
			i, j = i+1, j+1
		case i < len(a) && (j == len(b) || lcs[i+1][j] >= lcs[i][j+1]):
			lines = append(lines, line{'-', a[i]})
			i++
		default:
			lines = append(lines, line{'+', b[j]})
			j++
		}
	}
	var out strings.Builder
	for k, l := range lines {
		near := false
		for d := max(0, k-3); d <= min(len(lines)-1, k+3); d++ {
			near = near || lines[d].op != ' '
		}
		if near {
			fmt.Fprintf(&out, "%c %s\n", l.op, l.text)
		}
	}
	return out.String()
}

// ownLease makes a generated sidecar Role's Lease rights those of one Lease, as the chart and
// config/driver/s3 render it: create, list and watch Leases (create cannot be limited to a name),
// get, patch and update only lease.
func ownLease(t *testing.T, role *unstructured.Unstructured, lease string) {
	t.Helper()
	rules, _, err := unstructured.NestedSlice(role.Object, "rules")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range rules {
		rule := r.(map[string]any)
		if res, _ := rule["resources"].([]any); len(res) == 1 && res[0] == "leases" {
			rule["verbs"], found = []any{"create", "list", "watch"}, true
		}
	}
	if !found {
		t.Fatalf("%s: no rule for leases in the generated Role", role.GetName())
	}
	rules = append(rules, map[string]any{
		"apiGroups": []any{"coordination.k8s.io"}, "resources": []any{"leases"},
		"resourceNames": []any{lease}, "verbs": []any{"get", "patch", "update"},
	})
	if err := unstructured.SetNestedSlice(role.Object, rules, "rules"); err != nil {
		t.Fatal(err)
	}
}
