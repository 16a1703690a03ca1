//go:build !linux

package store

import "errors"

func mountTmpfs(string, int) error { return errors.New("tmpfs is Linux's") }

func unmountTmpfs(string) {}
