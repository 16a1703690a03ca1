package tests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"testing"
)

// pythonApplier runs the reference Python apply (examples/apply_patch.py) many times in one
// interpreter: each apply runs the script as its own __main__ (runpy, a fresh module, the
// same arguments as a command line) and reports its exit status and output, as pythonApply
// does; only the interpreter's start and numpy's import, most of a run's CPU, are paid once
// (make test's time: TestEngineDeltas applies 38 patches). pythonApply still runs it as a
// process where one run is checked.
type pythonApplier struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr bytes.Buffer
}

// pythonApplyDriver reads one JSON array of arguments a line and answers each with a JSON
// object {"code": exit status, "out": stdout and stderr}.
const pythonApplyDriver = `
import contextlib, io, json, runpy, sys, traceback
script = sys.argv[1]
for line in sys.stdin:
    buf = io.StringIO()
    code = 0
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        sys.argv = [script] + json.loads(line)
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if not isinstance(e.code, (int, type(None))):
                print(e.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
            code = 1
    sys.__stdout__.write(json.dumps({"code": code, "out": buf.getvalue()}) + "\n")
    sys.__stdout__.flush()
`

// startPythonApplier starts the interpreter; it exits when the test ends.
func startPythonApplier(t *testing.T) *pythonApplier {
	t.Helper()
	p := &pythonApplier{}
	p.cmd = exec.Command("/usr/bin/python3", "-c", pythonApplyDriver, filepath.Join(repoRoot(), "examples", "apply_patch.py"))
	p.cmd.Stderr = &p.stderr
	var err error
	if p.in, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.out = bufio.NewReader(out)
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start python3: %v", err)
	}
	t.Cleanup(func() {
		p.in.Close()
		if err := p.cmd.Wait(); err != nil {
			t.Errorf("the Python apply's interpreter: %v\n%s", err, p.stderr.String())
		}
	})
	return p
}

// apply is pythonApply in the running interpreter.
func (p *pythonApplier) apply(patch, file, name string) error {
	args, err := json.Marshal([]string{patch, file, "--name", name})
	if err != nil {
		return err
	}
	if _, err := p.in.Write(append(args, '\n')); err != nil {
		return fmt.Errorf("apply_patch.py: send to the interpreter: %v\n%s", err, p.stderr.String())
	}
	line, err := p.out.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("apply_patch.py: the interpreter did not answer: %v\n%s", err, p.stderr.String())
	}
	var res struct {
		Code int    `json:"code"`
		Out  string `json:"out"`
	}
	if err := json.Unmarshal(line, &res); err != nil {
		return fmt.Errorf("apply_patch.py: the interpreter's answer %q: %v", line, err)
	}
	if res.Code != 0 {
		return fmt.Errorf("apply_patch.py: exit status %d: %s", res.Code, res.Out)
	}
	return nil
}
