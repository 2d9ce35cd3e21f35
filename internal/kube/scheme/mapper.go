package scheme

import (
	"net/http"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// NewMapper is the managers' MapperProvider: controller-runtime's dynamic REST mapper, with each
// kind's mapping kept once found. A cached read of a namespaced kind asks the mapper whether the
// kind is namespaced, and controller-runtime's mapper answers by going through every resource of
// the group each time: a tenth of the sidecar's CPU in a restart's catch-up (docs/benchmark.md).
// The kinds COSI reads keep their mappings while a process runs; a kind not found is asked again
// each time, so one installed later is found.
func NewMapper(cfg *rest.Config, httpClient *http.Client) (meta.RESTMapper, error) {
	m, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	return Memoized(m), nil
}

// Memoized returns m with the mappings it finds (RESTMapping, RESTMappings) kept.
func Memoized(m meta.RESTMapper) meta.RESTMapper { return &memoMapper{RESTMapper: m} }

type memoMapper struct {
	meta.RESTMapper
	mapping  sync.Map // mappingKey -> *meta.RESTMapping
	mappings sync.Map // mappingKey -> []*meta.RESTMapping
}

type mappingKey struct {
	gk       schema.GroupKind
	versions string
}

func keyOf(gk schema.GroupKind, versions []string) mappingKey {
	return mappingKey{gk: gk, versions: strings.Join(versions, ",")}
}

func (m *memoMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	key := keyOf(gk, versions)
	if v, ok := m.mapping.Load(key); ok {
		return v.(*meta.RESTMapping), nil
	}
	mapping, err := m.RESTMapper.RESTMapping(gk, versions...)
	if err == nil {
		m.mapping.Store(key, mapping)
	}
	return mapping, err
}

func (m *memoMapper) RESTMappings(gk schema.GroupKind, versions ...string) ([]*meta.RESTMapping, error) {
	key := keyOf(gk, versions)
	if v, ok := m.mappings.Load(key); ok {
		return slices.Clone(v.([]*meta.RESTMapping)), nil
	}
	mappings, err := m.RESTMapper.RESTMappings(gk, versions...)
	if err == nil && len(mappings) > 0 {
		m.mappings.Store(key, slices.Clone(mappings))
	}
	return mappings, err
}
