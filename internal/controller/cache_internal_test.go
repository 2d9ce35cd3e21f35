package controller

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
)

// TestCacheDropsBucketInfo: the controller's cache keeps a Bucket without its bucketInfo, and
// with everything else the controller reads.
func TestCacheDropsBucketInfo(t *testing.T) {
	info := map[string]string{"COSI_PROTOCOL": "S3", "COSI_S3_BUCKET_NAME": "b"}
	b := &cosiapi.Bucket{
		ObjectMeta: metav1.ObjectMeta{Name: "b", Annotations: map[string]string{"a": "1"}},
		Spec:       cosiapi.BucketSpec{DriverName: "d", BucketClaimRef: cosiapi.BucketClaimReference{Name: "c"}},
		Status: cosiapi.BucketStatus{
			BucketID: "b", BucketInfo: maps.Clone(info), Protocols: []cosiapi.Protocol{cosiapi.ProtocolS3},
			Conditions: []metav1.Condition{{Type: cosiapi.ConditionProvisioned, Status: metav1.ConditionTrue}},
		},
	}
	want := b.DeepCopy()
	want.Status.BucketInfo = nil
	out, err := CacheOptions().DefaultTransform(b)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*cosiapi.Bucket)
	if got.Status.BucketInfo != nil {
		t.Errorf("the cached Bucket keeps its bucketInfo %v", got.Status.BucketInfo)
	}
	got.Status.BucketInfo = nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("cached Bucket\n%+v\nwant\n%+v", got, want)
	}
}

// TestControllerNeverReadsBucketInfo: no code of the controller but unread names bucketInfo: its
// cache does not hold it (a reconcile would find it empty), and its writes of a Bucket may not carry
// it.
func TestControllerNeverReadsBucketInfo(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == "unread" && fn.Recv == nil {
				continue
			}
			ast.Inspect(d, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "BucketInfo" {
					t.Errorf("%s: the controller reads bucketInfo, which its cache drops (unread)", fset.Position(sel.Pos()))
				}
				return true
			})
		}
	}
}

// TestControllerPackagesNeverReadBucketInfo: TestControllerNeverReadsBucketInfo scans this
// package only; a helper in another package the controller calls (conditions, patch, lookup, index,
// predicates...) that read a Bucket's bucketInfo would find the controller's cached copy empty just
// the same. No package of this module the controller builds with names bucketInfo, but slim
// (the transform that keeps or drops it).
func TestControllerPackagesNeverReadBucketInfo(t *testing.T) {
	out, err := exec.CommandContext(t.Context(), "go", "list", "-deps",
		"-f", "{{.ImportPath}}|{{.Dir}}|{{join .GoFiles \",\"}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const internal = "github.com/kube-cosi/cosi/internal/"
	fset := token.NewFileSet()
	scanned := 0
	for line := range strings.Lines(string(out)) {
		parts := strings.SplitN(strings.TrimSpace(line), "|", 3)
		if len(parts) != 3 || !strings.HasPrefix(parts[0], internal) ||
			parts[0] == internal+"cache/slim" || parts[0] == internal+"controller" {
			continue
		}
		scanned++
		for name := range strings.SplitSeq(parts[2], ",") {
			if name == "" {
				continue
			}
			f, err := parser.ParseFile(fset, filepath.Join(parts[1], name), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "BucketInfo" {
					t.Errorf("%s: a package the controller calls reads bucketInfo, which its cache drops (unread)",
						fset.Position(sel.Pos()))
				}
				return true
			})
		}
	}
	if scanned == 0 {
		t.Fatal("go list named no package of this module: the test cannot tell")
	}
}
