// Package cel tests the API server side validation of the COSI CRDs (OpenAPI schema and CEL
// rules), and their documentation as kubectl explain shows it, against a real kube-apiserver and
// etcd. Cases are table-driven, one table per kind, in the style of gateway-api's tests/cel.
package cel

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kube-cosi/cosi/dev/testenv"
)

// testNamespace holds the namespaced objects of this package's tests.
const testNamespace = "cel-test"

var env *testenv.Env

func TestMain(m *testing.M) {
	testenv.Run(m, func(ctx context.Context, e *testenv.Env) error {
		env = e
		return env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNamespace}})
	})
}

var nameCounter atomic.Int64

// uniqueName returns an object name not used by any other case of this package.
func uniqueName(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, nameCounter.Add(1))
}

// create sends obj to the API server, after deleting the fields at the removed paths from its
// JSON form (to test fields that are absent, which a typed Go object cannot express for fields
// without omitempty). It returns the API server's error.
func create(ctx context.Context, obj client.Object, removed [][]string) error {
	if len(removed) == 0 {
		return env.Client.Create(ctx, obj)
	}
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return err
	}
	for _, path := range removed {
		unstructured.RemoveNestedField(content, path...)
	}
	u := &unstructured.Unstructured{Object: content}
	gvk, err := env.Client.GroupVersionKindFor(obj)
	if err != nil {
		return err
	}
	u.SetGroupVersionKind(gvk)
	return env.Client.Create(ctx, u)
}

// checkErrors fails t unless err is nil when want is empty, or is an Invalid error whose message
// contains every string of want. Each case names the field path and the message it expects, so a
// rule that rejects for the wrong reason, or an error that does not name the field, fails.
func checkErrors(t *testing.T, err error, want []string) {
	t.Helper()
	if len(want) == 0 {
		if err != nil {
			t.Fatalf("expected the object to be accepted, got: %v", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("expected the object to be rejected with %q, it was accepted", want)
	}
	t.Logf("rejected as expected: %v", err)
	if !apierrors.IsInvalid(err) {
		t.Fatalf("expected an Invalid error containing %q, got %T: %v", want, err, err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error does not contain %q:\n%v", w, err)
		}
	}
}
