package main

import (
	"flag"

	"github.com/weightfs/weightfs/internal/cliflags"
)

// errHelp means --help was asked for: the help is printed and the exit code is 0.
var errHelp = cliflags.ErrHelp

// parseArgs parses args against fs, flags before, between or after the arguments.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	return cliflags.Parse(fs, args)
}
