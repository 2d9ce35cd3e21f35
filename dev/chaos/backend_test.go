package chaos

import (
	"slices"
	"testing"
)

// TestPolicyBuckets checks that the audit reads every form an identity policy may take: what it
// cannot read counts as reaching anything.
func TestPolicyBuckets(t *testing.T) {
	for _, c := range []struct {
		doc  string
		want []string
		ok   bool
	}{
		{`{"Statement":[{"Effect":"Allow","Action":["s3:GetObject"],"Resource":["arn:aws:s3:::b1/*"]},` +
			`{"Effect":"Allow","Action":"s3:ListBucket","Resource":["arn:aws:s3:::b1"]}]}`, []string{"b1", "b1"}, true},
		{`{"Statement":[{"Effect":"Allow","Action":"s3:ListBucket","Resource":"arn:aws:s3:::b2"}]}`,
			[]string{"b2"}, true},
		{`{"Statement":[{"Effect":"Deny","Action":"s3:*","Resource":"arn:aws:s3:::b3"}]}`, nil, true},
		{`{"Statement":[{"Effect":"Allow","Action":"s3:*","Resource":"*"}]}`, []string{"*"}, true},
		{`{"Statement":[{"Effect":"Allow","Action":"s3:*","Resource":"arn:aws:s3:::prod-*"}]}`, []string{"*"}, true},
		{`{"Statement":[{"Effect":"Allow","Action":"s3:*","NotResource":"arn:aws:s3:::b4"}]}`, []string{"*"}, true},
		{`{"Statement":[{"Effect":"Allow","Action":"s3:*","Resource":{"x":1}}]}`, nil, false},
		{`not json`, nil, false},
	} {
		got, ok := policyBuckets(c.doc)
		if ok != c.ok || !slices.Equal(got, c.want) {
			t.Errorf("policyBuckets(%s) = %v, %v; want %v, %v", c.doc, got, ok, c.want, c.ok)
		}
	}
}
