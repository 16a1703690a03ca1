package main

import (
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/weightfs/weightfs/store"
)

// cmdGroup shows a writer group's records or ends a version that cannot complete:
// `weightfs group status STORE NAME`, `weightfs group abort STORE NAME VERSION` (docs/cli.md,
// docs/format.md Part I §9). Both open the store read-only: they run beside the group's
// publisher, which holds the writer's lock or lease.
func cmdGroup(e *env, args []string) error {
	fs := newFlags("group")
	ranks := fs.Int("ranks", 0, "with abort: W, if no record of the version says it")
	why := fs.String("why", "", "with abort: a reason, kept in the refusal record for the ranks' logs")
	pos, st, err := openReaderAfter(e, fs, args, 3, 4)
	if err != nil {
		return err
	}
	defer st.Close()
	action, group := pos[0], pos[2]
	switch {
	case action == "status" && len(pos) == 3:
		sts, err := st.GroupStatus(group)
		if err != nil {
			return err
		}
		if len(sts) == 0 {
			fmt.Fprintf(e.stdout, "group %s: no records (no version being written)\n", group)
			return nil
		}
		for _, s := range sts {
			fmt.Fprintln(e.stdout, describeGroupVersion(s))
		}
		return nil
	case action == "abort" && len(pos) == 4:
		v, err := strconv.ParseUint(strings.TrimPrefix(pos[3], "v"), 10, 64)
		if err != nil {
			return usagef("group abort: VERSION %q is not a number", pos[3])
		}
		if err := st.CancelGroupVersion(group, v, *ranks, *why); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "version %d of group %s aborted: its ranks' DONE fails with ECANCELED; write the next save under a higher number\n", v, group)
		return nil
	}
	return usagef("use: weightfs group status STORE NAME, or weightfs group abort STORE NAME VERSION")
}

// openReaderAfter is openReader for a command whose STORE is its second argument.
func openReaderAfter(e *env, fs *flag.FlagSet, args []string, min, max int) ([]string, *cliStore, error) {
	sf := addStoreFlags(fs, true)
	pos, err := parse(e, fs, args, min, max)
	if err != nil {
		return nil, nil, err
	}
	st, err := openStore(e, pos[1], true, "", sf)
	if err != nil {
		return nil, nil, err
	}
	return pos, st, nil
}

// describeGroupVersion is one line of `group status`.
func describeGroupVersion(s store.GroupVersionStatus) string {
	var b strings.Builder
	fmt.Fprintf(&b, "version %d", s.Version)
	if s.Ranks > 0 {
		fmt.Fprintf(&b, " (%d ranks)", s.Ranks)
	}
	b.WriteString(":")
	var parts []string
	if len(s.Sealed) > 0 {
		parts = append(parts, "sealed by "+ranksText(s.Sealed))
	}
	if len(s.Writing) > 0 {
		parts = append(parts, "being written by "+ranksText(s.Writing))
	}
	if s.Ranks > 0 && s.Refused == nil {
		var none []int
		for r := range s.Ranks {
			if !slices.Contains(s.Sealed, r) && !slices.Contains(s.Writing, r) {
				none = append(none, r)
			}
		}
		if len(none) > 0 {
			parts = append(parts, "not begun by "+ranksText(none))
		}
	}
	if s.Refused != nil {
		parts = append(parts, fmt.Sprintf("REFUSED (%s) by %s, naming %s: %s", s.Refused.Kind, s.Refused.Publisher, ranksText(s.Refused.Blamed), s.Refused.Reason))
	}
	if s.Taken {
		parts = append(parts, "taken (published or overtaken): its records go at the next publish")
	}
	for _, d := range s.Damaged {
		parts = append(parts, "DAMAGED "+d)
	}
	b.WriteString(" " + strings.Join(parts, "; "))
	return b.String()
}

func ranksText(ranks []int) string {
	if len(ranks) == 0 {
		return "no rank"
	}
	s := make([]string, len(ranks))
	for i, r := range ranks {
		s[i] = strconv.Itoa(r)
	}
	if len(ranks) == 1 {
		return "rank " + s[0]
	}
	return "ranks " + strings.Join(s, ", ")
}
