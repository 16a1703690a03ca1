// Command weightfs is the one binary of weightfs: it creates stores, mounts them over FUSE,
// ingests and exports versions, renders and applies patches, and checks stores. It parses
// flags, wires the packages together and prints; the logic lives in the packages.
package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// command is one subcommand of the CLI.
type command struct {
	name    string
	args    string // synopsis of the positional arguments
	summary string
	run     func(env *env, args []string) error
}

// env is what a command may touch of the process: its streams and how to report.
type env struct {
	stdout, stderr io.Writer
	// isTerminal reports whether stderr is a terminal, for progress lines.
	isTerminal bool
	// log is where a command logs: stderr, or the --log-file, at --log-level in --log-format
	// (logging.go). The error that ends a command is printed on stderr, not logged.
	log     *slog.Logger
	logFile *logFile // the open --log-file, closed when the command returns
}

// usageError marks a mistake in how the command was called: it prints the command's help.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

func commands() []command {
	return []command{
		{"init", "STORE", "create an empty store", cmdInit},
		{"mount", "STORE MNT", "serve a store over FUSE until unmounted or signalled", cmdMount},
		{"commit", "STORE DIR", "ingest a directory as the next version, without FUSE", cmdCommit},
		{"log", "STORE", "list versions: number, time, files, logical and stored bytes, changed fraction", cmdLog},
		{"diff", "STORE A B", "per-tensor changed-element counts between two versions", cmdDiff},
		{"export", "STORE VERSION DIR", "write a version out as plain files", cmdExport},
		{"patch", "STORE VERSION", "write the one-file sparse patch of a version (--from K: from any earlier version)", cmdPatch},
		{"apply", "PATCH FILE|DIR", "apply a patch in place to a local safetensors file or checkpoint directory, checking its base", cmdApply},
		{"follow", "MNT DIR", "keep a local checkpoint directory at a mount's latest version, by patches", cmdFollow},
		{"verify", "STORE", "re-read and re-hash everything; exit non-zero on any damage", cmdVerify},
		{"gc", "STORE", "drop old versions, keeping every kept version readable", cmdGC},
		{"lease", "show|break STORE", "show the writer's lease of a store, or break a dead writer's lease (s3:// stores)", cmdLease},
		{"group", "status|abort STORE NAME [VERSION]", "a writer group's records by version, or end a version that cannot complete (its ranks' DONE fails)", cmdGroup},
		{"gpus", "", "GPUs found (NVML) and which diff backend would run", cmdGPUs},
	}
}

func main() {
	e := &env{stdout: os.Stdout, stderr: os.Stderr, isTerminal: isTerminal(os.Stderr)}
	// No command may die of a SIGUSR1 meant for a log file it does not have (logrotate's
	// postrotate signals every weightfs): a --log-file listens for it (logging.go).
	signal.Ignore(syscall.SIGUSR1)
	// Installed as /sbin/mount.weightfs (a link), the binary is mount(8)'s helper.
	if filepath.Base(os.Args[0]) == helperName {
		os.Exit(mountHelper(e, os.Args[1:]))
	}
	os.Exit(run(e, os.Args[1:]))
}

// run executes one command line and returns the process exit code: 0 success, 1 failure,
// 2 a usage error.
func run(e *env, argv []string) int {
	cmds := commands()
	if len(argv) == 0 || argv[0] == "-h" || argv[0] == "--help" || argv[0] == "help" {
		if len(argv) == 2 {
			argv = []string{argv[1], "--help"}
		} else {
			printUsage(e.stdout, cmds)
			if len(argv) == 0 {
				return 2
			}
			return 0
		}
	}
	if argv[0] == "--version" || argv[0] == "version" {
		fmt.Fprintln(e.stdout, versionLine())
		return 0
	}
	if e.log == nil {
		e.log = slog.New(slog.NewTextHandler(e.stderr, nil))
	}
	for _, c := range cmds {
		if c.name != argv[0] {
			continue
		}
		stopProfile := startProfile(e)
		err := c.run(e, argv[1:])
		stopProfile()
		e.closeLog()
		switch {
		case err == nil:
			return 0
		case errors.Is(err, errHelp):
			return 0
		case errors.As(err, new(usageError)):
			fmt.Fprintf(e.stderr, "weightfs %s: %v\nRun 'weightfs %s --help' for usage.\n", c.name, err, c.name)
			return 2
		default:
			fmt.Fprintf(e.stderr, "weightfs %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(e.stderr, "weightfs: unknown command %q\n", argv[0])
	if s := suggest(argv[0], cmds); s != "" {
		fmt.Fprintf(e.stderr, "Did you mean %q?\n", s)
	}
	fmt.Fprintln(e.stderr, "Run 'weightfs --help' for the list of commands.")
	return 2
}

func printUsage(w io.Writer, cmds []command) {
	fmt.Fprintln(w, "weightfs: a versioned filesystem for LLM weights in RL post-training.")
	fmt.Fprintln(w, "\nUsage: weightfs COMMAND [flags] ARGS   (flags may stand before or after the arguments)")
	fmt.Fprintln(w, "\nCommands:")
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'weightfs COMMAND --help' for the flags of a command.")
}

// suggest returns the command whose name shares the longest prefix with s, if any does.
func suggest(s string, cmds []command) string {
	type cand struct {
		name string
		n    int
	}
	var cs []cand
	for _, c := range cmds {
		n := 0
		for n < len(s) && n < len(c.name) && s[n] == c.name[n] {
			n++
		}
		if n >= 2 || strings.Contains(c.name, s) && len(s) >= 2 {
			cs = append(cs, cand{c.name, n})
		}
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].n > cs[j].n })
	if len(cs) == 0 {
		return ""
	}
	return cs[0].name
}
