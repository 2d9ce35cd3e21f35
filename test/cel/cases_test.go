package cel

import (
	"context"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// createCase is an object to create: a valid object changed by mutate, minus the fields at the
// removed paths. wantErrors empty means it must be accepted.
type createCase[T client.Object] struct {
	name       string
	mutate     func(T)
	removed    [][]string
	wantErrors []string
}

// updateCase creates a valid object (changed by before, if set), optionally writes its status
// with statusBefore (which must be accepted), then applies update and sends it, to the status
// subresource when status is true. wantErrors empty means the update must be accepted.
type updateCase[T client.Object] struct {
	name         string
	before       func(T)
	statusBefore func(T)
	update       func(T)
	status       bool
	wantErrors   []string
}

func runCreateCases[T client.Object](t *testing.T, newObj func(name string) T, cases []createCase[T]) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			obj := newObj(uniqueName("c"))
			if tc.mutate != nil {
				tc.mutate(obj)
			}
			checkErrors(t, create(t.Context(), obj, tc.removed), tc.wantErrors)
		})
	}
}

func runUpdateCases[T client.Object](t *testing.T, newObj func(name string) T, cases []updateCase[T]) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			obj := newObj(uniqueName("u"))
			if tc.before != nil {
				tc.before(obj)
			}
			if err := env.Client.Create(ctx, obj); err != nil {
				t.Fatalf("creating the object to update: %v", err)
			}
			if tc.statusBefore != nil {
				tc.statusBefore(obj)
				if err := env.Client.Status().Update(ctx, obj); err != nil {
					t.Fatalf("writing the initial status: %v", err)
				}
			}
			tc.update(obj)
			checkErrors(t, update(ctx, obj, tc.status), tc.wantErrors)
		})
	}
}

func update(ctx context.Context, obj client.Object, status bool) error {
	if status {
		return env.Client.Status().Update(ctx, obj)
	}
	return env.Client.Update(ctx, obj)
}
