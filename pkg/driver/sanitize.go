package driver

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	cosiproto "github.com/kube-cosi/cosi/proto"
)

// strippedValue replaces the value of every field marked cosi_secret.
const strippedValue = StrippedValue

// StrippedValue is what StripSecrets puts in place of a secret: a log at LogLevelBodies holds it
// once per credential a driver returned, which is how cosi-sanity knows the log shows responses.
const StrippedValue = "***stripped***"

// StripSecrets returns a fmt.Stringer that renders msg as JSON with the value of every field
// marked (cosi.v1alpha2.cosi_secret) = true replaced by "***stripped***", at any depth (nested
// messages, lists and maps). msg itself is not changed. Rendering happens only when the result is
// printed, so passing it to a disabled log level costs nothing.
//
// Every kind of logger sees the stripped JSON: fmt and klog through String, logr sinks that
// support it (funcr, zapr) through logr.Marshaler, and log/slog handlers (a logr.Logger made with
// logr.FromSlogHandler, as the sidecar's and the controller's JSON logs are) through
// slog.LogValuer. Without the last, slog's JSON handler marshals the value's unexported field and
// prints {}.
func StripSecrets(msg any) fmt.Stringer {
	m, _ := msg.(proto.Message)
	return stripped{msg: m}
}

type stripped struct {
	msg proto.Message
}

func (s stripped) String() string {
	b, err := s.json()
	if err != nil {
		return "<unprintable: " + err.Error() + ">"
	}
	return string(b)
}

// json is the stripped message as JSON.
func (s stripped) json() ([]byte, error) {
	if s.msg == nil {
		return []byte("null"), nil
	}
	m := proto.Clone(s.msg)
	stripMessage(m.ProtoReflect())
	return protojson.MarshalOptions{EmitUnpopulated: false}.Marshal(m)
}

// MarshalLog makes logr sinks that support it print the stripped JSON.
func (s stripped) MarshalLog() any {
	return s.String()
}

// LogValue makes log/slog handlers print the stripped message: slog's JSON handler as a JSON
// object (json.RawMessage is written as it is), its text handler as the JSON text.
func (s stripped) LogValue() slog.Value {
	b, err := s.json()
	if err != nil {
		return slog.StringValue("<unprintable: " + err.Error() + ">")
	}
	return slog.AnyValue(json.RawMessage(b))
}

func isSecret(fd protoreflect.FieldDescriptor) bool {
	secret, _ := proto.GetExtension(fd.Options(), cosiproto.E_CosiSecret).(bool)
	v1Secret := false
	if v1 := v1alpha1CosiSecret(); v1 != nil {
		v1Secret, _ = proto.GetExtension(fd.Options(), v1).(bool)
	}
	// v1alpha1 marks nothing in its grant response: the credentials' secrets map holds the keys.
	return secret || v1Secret || fd.FullName() == v1alpha1CredentialSecrets
}

// v1alpha1CosiSecret is v1alpha1's cosi_secret option, looked up by name rather than imported so
// that a driver's binary does not link the v1alpha1 protocol: a process that has v1alpha1
// messages to log (the sidecar, cosi-sanity) has registered it with them; in any other process
// it is nil.
var v1alpha1CosiSecret = sync.OnceValue(func() protoreflect.ExtensionType {
	xt, err := protoregistry.GlobalTypes.FindExtensionByName(v1alpha1CosiSecretName)
	if err != nil {
		return nil
	}
	return xt
})

const v1alpha1CosiSecretName protoreflect.FullName = "cosi.v1alpha1.cosi_secret"

// v1alpha1CredentialSecrets is the v1alpha1 field that carries a grant's keys.
const v1alpha1CredentialSecrets protoreflect.FullName = "cosi.v1alpha1.CredentialDetails.secrets"

func stripMessage(m protoreflect.Message) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case isSecret(fd):
			if fd.Kind() == protoreflect.StringKind && !fd.IsList() && !fd.IsMap() {
				m.Set(fd, protoreflect.ValueOfString(strippedValue))
			} else {
				// Secrets of other shapes are removed entirely.
				m.Clear(fd)
			}
		case fd.IsList() && fd.Message() != nil:
			list := v.List()
			for i := range list.Len() {
				stripMessage(list.Get(i).Message())
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				stripMessage(mv.Message())
				return true
			})
		case fd.Message() != nil && !fd.IsList() && !fd.IsMap():
			stripMessage(v.Message())
		}
		return true
	})
}
