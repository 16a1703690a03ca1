package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

// errHelp is returned when --help was asked for: the help was printed, exit 0.
var errHelp = errors.New("help shown")

// boolFlag is the interface flag's boolean values implement.
type boolFlag interface{ IsBoolFlag() bool }

// parseArgs parses args against fs, allowing flags before, between and after the positional
// arguments (as git and kubectl do); "--" ends the flags. It returns the positional arguments.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var flags, positional []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			positional = append(positional, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			positional = append(positional, a)
			continue
		}
		name := strings.TrimLeft(a, "-")
		if j := strings.IndexByte(name, '='); j >= 0 {
			flags = append(flags, a)
			continue
		}
		if name == "h" || name == "help" {
			flags = append(flags, a)
			continue
		}
		f := fs.Lookup(name)
		if f == nil {
			return nil, usagef("unknown flag %s", a)
		}
		flags = append(flags, a)
		if b, ok := f.Value.(boolFlag); ok && b.IsBoolFlag() {
			continue
		}
		if i+1 >= len(args) {
			return nil, usagef("flag %s needs a value", a)
		}
		i++
		flags = append(flags, args[i])
	}
	fs.SetOutput(io.Discard)
	if err := fs.Parse(flags); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, errHelp
		}
		return nil, usagef("%v", err)
	}
	return positional, nil
}

// newFlags makes the flag set of a command; parse prints its help on --help.
func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {}
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

// buildVersion is the module version stamped by the Go toolchain, or "dev".
func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}
