package cliflags

import (
	"errors"
	"flag"
	"reflect"
	"testing"
)

func TestParse(t *testing.T) {
	cases := []struct {
		args    []string
		pos     []string
		version string
		all     bool
		err     string
	}{
		{[]string{"a", "b"}, []string{"a", "b"}, "", false, ""},
		{[]string{"--version", "3", "a", "b"}, []string{"a", "b"}, "3", false, ""},
		{[]string{"a", "--version", "3", "b", "--all"}, []string{"a", "b"}, "3", true, ""},
		{[]string{"a", "--version=4", "-all"}, []string{"a"}, "4", true, ""},
		{[]string{"--", "--version", "x"}, []string{"--version", "x"}, "", false, ""},
		{[]string{"-", "a"}, []string{"-", "a"}, "", false, ""},
		{[]string{"a", "--nope"}, nil, "", false, "unknown flag --nope"},
		{[]string{"a", "--version"}, nil, "", false, "flag --version needs a value"},
		{[]string{"--all=maybe"}, nil, "", false, "invalid boolean value \"maybe\" for -all: parse error"},
	}
	for _, tc := range cases {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		version := fs.String("version", "", "")
		all := fs.Bool("all", false, "")
		pos, err := Parse(fs, tc.args)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("%v: error %v, want %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(pos, tc.pos) || *version != tc.version || *all != tc.all {
			t.Errorf("%v: pos %q version %q all %v err %v; want %q %q %v", tc.args, pos, *version, *all, err, tc.pos, tc.version, tc.all)
		}
	}
	for _, h := range []string{"-h", "--help", "-help"} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		if _, err := Parse(fs, []string{"a", h}); !errors.Is(err, ErrHelp) {
			t.Errorf("%s: %v, want ErrHelp", h, err)
		}
	}
}
