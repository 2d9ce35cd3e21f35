//go:build tools

// Package tools pins the Versity gateway's command.
package tools

import _ "github.com/versity/versitygw/cmd/versitygw"
