package driver

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	v1 "sigs.k8s.io/container-object-storage-interface/proto"

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
func StripSecrets(msg any) fmt.Stringer {
	m, _ := msg.(proto.Message)
	return stripped{msg: m}
}

type stripped struct {
	msg proto.Message
}

func (s stripped) String() string {
	if s.msg == nil {
		return "null"
	}
	m := proto.Clone(s.msg)
	stripMessage(m.ProtoReflect())
	b, err := protojson.MarshalOptions{EmitUnpopulated: false}.Marshal(m)
	if err != nil {
		return "<unprintable: " + err.Error() + ">"
	}
	return string(b)
}

// MarshalLog makes logr sinks that support it print the stripped JSON.
func (s stripped) MarshalLog() any {
	return s.String()
}

func isSecret(fd protoreflect.FieldDescriptor) bool {
	secret, _ := proto.GetExtension(fd.Options(), cosiproto.E_CosiSecret).(bool)
	v1Secret, _ := proto.GetExtension(fd.Options(), v1.E_CosiSecret).(bool)
	// v1alpha1 marks nothing in its grant response: the credentials' secrets map holds the keys.
	return secret || v1Secret || fd.FullName() == v1alpha1CredentialSecrets
}

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
