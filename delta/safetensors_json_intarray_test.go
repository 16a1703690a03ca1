package delta

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// intArrayTokenWalk is intArray as it was: a token per element. The reference that
// intArray must agree with.
func intArrayTokenWalk(dec *json.Decoder) ([]int64, error) {
	if err := expectDelim(dec, '['); err != nil {
		return nil, err
	}
	var out []int64
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		num, ok := tok.(json.Number)
		if !ok {
			return nil, fmt.Errorf("element %d is %v, not a number", len(out), tok)
		}
		v, err := strconv.ParseInt(string(num), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("element %d (%s) is not an integer in int64 range", len(out), num)
		}
		if v < 0 {
			return nil, fmt.Errorf("element %d (%d) is negative", len(out), v)
		}
		out = append(out, v)
	}
	return out, expectDelim(dec, ']')
}

// TestIntArrayMatchesTokenWalk: intArray, which cuts the array's bytes at its commas,
// accepts and refuses what the token walk did, with the same numbers, for values of every
// kind in a tensor entry's shape (and what follows it still parses).
func TestIntArrayMatchesTokenWalk(t *testing.T) {
	values := []string{
		`[]`, `[ ]`, "[\n]", `[0]`, `[1,2]`, ` [ 1 , 2 ] `, "[1,\t2,\r\n3]", `[-0]`, `[-1]`, `[1.0]`, `[1e3]`,
		`[1E3]`, `[0.5]`, `[9223372036854775807]`, `[9223372036854775808]`, `[-9223372036854775808]`,
		`["1"]`, `["a,1"]`, `[1,"2"]`, `[[1]]`, `[[1,2],3]`, `[1,[2]]`, `[null]`, `[true]`, `[false]`,
		`[{}]`, `[{"a":1}]`, `[1,{"a":[1,2]}]`, `null`, `{}`, `"[1]"`, `1`, `true`, `[1,2,3,4,5,6,7,8]`,
		`[01]`, `[1,]`, `[,1]`, `[1 2]`, `[`, `]`, `[1`, `[+1]`, `[.5]`, `[1.]`, `[-]`, `["\u0031"]`,
	}
	rng := rand.New(rand.NewPCG(29, 11))
	parts := []string{"0", "1", "42", "-3", "7.5", "1e2", `"x"`, "null", "[1]", "{}", "123456789012"}
	for range 300 {
		n := rng.IntN(5)
		el := make([]string, n)
		for i := range el {
			el[i] = parts[rng.IntN(len(parts))]
		}
		values = append(values, "["+strings.Join(el, strings.Repeat(" ", rng.IntN(2))+",")+"]")
	}
	for _, v := range values {
		doc := `{"shape": ` + v + `, "next": [5]}`
		parse := func(f func(*json.Decoder) ([]int64, error)) ([]int64, error, []int64, error) {
			dec := json.NewDecoder(bytes.NewReader([]byte(doc)))
			dec.UseNumber()
			if err := expectDelim(dec, '{'); err != nil {
				t.Fatal(err)
			}
			if _, err := stringToken(dec); err != nil {
				t.Fatal(err)
			}
			got, err := f(dec)
			if err != nil {
				return got, err, nil, nil
			}
			if _, err := stringToken(dec); err != nil {
				return got, nil, nil, err
			}
			next, nerr := f(dec)
			return got, nil, next, nerr
		}
		want, wantErr, wantNext, wantNextErr := parse(intArrayTokenWalk)
		got, gotErr, gotNext, gotNextErr := parse(intArray)
		if (gotErr == nil) != (wantErr == nil) || (gotNextErr == nil) != (wantNextErr == nil) {
			t.Errorf("%s: intArray error %v (then %v), token walk %v (then %v)", v, gotErr, gotNextErr, wantErr, wantNextErr)
			continue
		}
		if !slices.Equal(got, want) || !slices.Equal(gotNext, wantNext) {
			t.Errorf("%s: intArray %v (then %v), token walk %v (then %v)", v, got, gotNext, want, wantNext)
		}
	}
}
