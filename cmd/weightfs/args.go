package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/weightfs/weightfs/internal/cliflags"
)

// errHelp is returned when --help was asked for: the help was printed, exit 0.
var errHelp = cliflags.ErrHelp

// parseArgs parses args against fs (flags before or after the arguments, see cliflags);
// mistakes in the command line become usage errors.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	pos, err := cliflags.Parse(fs, args)
	if err != nil && !errors.Is(err, errHelp) {
		return nil, usagef("%v", err)
	}
	return pos, err
}

// newFlags makes the flag set of a command; parse prints its help on --help.
func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {}
	addLogFlags(fs)
	return fs
}

// parse parses a command's arguments and checks their count; on --help it prints the help.
func parse(e *env, fs *flag.FlagSet, args []string, min, max int) ([]string, error) {
	pos, err := parseArgs(fs, args)
	if errors.Is(err, errHelp) {
		printHelp(e.stdout, fs)
		return nil, errHelp
	}
	if err != nil {
		return nil, err
	}
	if err := e.startLog(logSettingsOf(fs)); err != nil {
		return nil, err
	}
	if len(pos) < min || (max >= 0 && len(pos) > max) {
		c := lookup(fs.Name())
		return nil, usagef("expected arguments %s, got %d argument(s)", c.args, len(pos))
	}
	return pos, nil
}

func lookup(name string) command {
	for _, c := range commands() {
		if c.name == name {
			return c
		}
	}
	return command{name: name}
}

func printHelp(w io.Writer, fs *flag.FlagSet) {
	c := lookup(fs.Name())
	fmt.Fprintf(w, "Usage: weightfs %s [flags] %s\n\n%s.\n", c.name, c.args, strings.ToUpper(c.summary[:1])+c.summary[1:])
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		fmt.Fprintln(w, "\nFlags (before or after the arguments):")
		fs.SetOutput(w)
		fs.PrintDefaults()
	}
}
