package attrexpr

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// usage is the response the cases evaluate over: 32 prompt, 10 completion
// and 42 total tokens.
var usage = Usage{PromptTokens: 32, CompletionTokens: 10, TotalTokens: 42}

// The values and errors are what cel-go v0.26.0, upstream's, gives for the
// same expressions over the same usage in upstream's environment, but for
// ErrNotWhole and ErrNotNumber, the picker's own: cel-go gives the double
// (NaN, an infinity, one past 2^63) or the bool, which upstream converts
// to an int64 unchecked or leaves unreported.
func TestInt(t *testing.T) {
	cases := map[string]struct {
		src     string
		want    int64
		wantErr error
	}{
		"field":                       {src: "usage.completion_tokens", want: 10},
		"sum of fields":               {src: "usage.prompt_tokens + usage.completion_tokens", want: 42},
		"double literal":              {src: "usage.prompt_tokens + 1.0", want: 33},
		"int mixed through c ? a : b": {src: "(true ? usage.prompt_tokens : 1) * 2", wantErr: ErrMixed},
		"double division":             {src: "usage.prompt_tokens / usage.completion_tokens", want: 3},
		"double over zero":            {src: "usage.prompt_tokens / (usage.total_tokens - 42.0)", wantErr: ErrNotWhole},
		"int division by zero":        {src: "7 / 0", wantErr: ErrDivByZero},
		"int modulus by zero":         {src: "7 % (1 - 1)", wantErr: ErrModByZero},
		"int modulus":                 {src: "7 % 2", want: 1},
		"int truncates to zero":       {src: "-7 / 2", want: -3},
		"overflow":                    {src: "9223372036854775807 + 1", wantErr: ErrOverflow},
		"negated min":                 {src: "-(-9223372036854775808)", wantErr: ErrOverflow},
		"min literal":                 {src: "-9223372036854775808", want: -9223372036854775808},
		"min over minus one":          {src: "-9223372036854775808 / -1", wantErr: ErrOverflow},
		"has guards":                  {src: "(has(usage.prompt_tokens) ? usage.prompt_tokens : 0) + (has(usage.completion_tokens) ? usage.completion_tokens : 0)", want: 42},
		"negated field":               {src: "-usage.prompt_tokens", want: -32},
		"precedence":                  {src: "2 + 3 * 4 - 10 / 5", want: 12},
		"parentheses":                 {src: "(2 + 3) * 4", want: 20},
		"hex":                         {src: "0x10", want: 16},
		"hex digits of any case":      {src: "0xfF", want: 255},
		"leading zero is decimal":     {src: "010", want: 10},
		"exponent":                    {src: "1e3", want: 1000},
		"fraction":                    {src: ".5 + usage.prompt_tokens", want: 32},
		"comment":                     {src: "// the cost\n usage.completion_tokens", want: 10},
		"ternary on a field":          {src: "(true ? usage.prompt_tokens : false) ? 1 : 2", wantErr: ErrNoOverload},
		"even run of !":               {src: "!!usage.completion_tokens", want: 10},
		"even run of -":               {src: "--usage.completion_tokens", want: 10},
		"odd run of -":                {src: "---1", want: -1},
		"signed literal after !":      {src: "!!-1", want: -1},
		"right-assoc ternary":         {src: "false ? 1 : true ? 2 : 3", want: 2},
		"bool value":                  {src: "usage.prompt_tokens > 1.0 ? true : false", wantErr: ErrNotNumber},
		"NaN":                         {src: "(usage.total_tokens - 42.0) / (usage.total_tokens - 42.0)", wantErr: ErrNotWhole},
		"too large":                   {src: "usage.prompt_tokens * 1e300", wantErr: ErrNotWhole},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e, err := Parse(tc.src)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tc.src, err)
			}
			got, err := e.Int(&usage)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Int(%q) error = %v, want %v", tc.src, err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("Int(%q) = %d, want %d", tc.src, got, tc.want)
			}
		})
	}
}

func TestBool(t *testing.T) {
	cases := map[string]struct {
		src     string
		want    bool
		wantErr error
	}{
		"has":                   {src: "has(usage.completion_tokens)", want: true},
		"has both":              {src: "has(usage.prompt_tokens) && has(usage.completion_tokens)", want: true},
		"cross-kind compare":    {src: "usage.completion_tokens > 0", want: true},
		"cross-kind equal":      {src: "usage.completion_tokens == 10", want: true},
		"not equal":             {src: "usage.completion_tokens != 10", want: false},
		"le":                    {src: "usage.completion_tokens <= 9", want: false},
		"ge":                    {src: "usage.completion_tokens >= 10.0", want: true},
		"bool against number":   {src: "usage.prompt_tokens == true", want: false},
		"false absorbs error":   {src: "false && 1 / 0 > 2", want: false},
		"error then false":      {src: "1 / 0 > 2 && false", want: false},
		"true absorbs error":    {src: "1 / 0 > 2 || true", want: true},
		"error stays":           {src: "1 / 0 > 2 && true", wantErr: ErrDivByZero},
		"or of falses":          {src: "false || 1 > 2", want: false},
		"not":                   {src: "!(usage.completion_tokens > 5)", want: false},
		"NaN is not ordered":    {src: "(usage.total_tokens - 42.0) / (usage.total_tokens - 42.0) > 1.0", wantErr: ErrNaNOrdered},
		"NaN is not equal":      {src: "(usage.total_tokens - 42.0) / (usage.total_tokens - 42.0) == (usage.total_tokens - 42.0) / (usage.total_tokens - 42.0)", want: false},
		"bools order":           {src: "true < false", want: false},
		"chained equality":      {src: "true == false == false", want: true},
		"number is not a bool":  {src: "usage.prompt_tokens", wantErr: ErrNotBoolean},
		"not of a number":       {src: "!(true ? usage.prompt_tokens : false)", wantErr: ErrNoOverload},
		"even run of - on bool": {src: "--true", want: true},
		"odd run of !":          {src: "!!!(usage.completion_tokens > 5)", want: false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e, err := Parse(tc.src)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tc.src, err)
			}
			got, err := e.Bool(&usage)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Bool(%q) error = %v, want %v", tc.src, err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("Bool(%q) = %t, want %t", tc.src, got, tc.want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	cases := map[string]struct {
		src  string
		want string
	}{
		"function":         {src: "size(usage)", want: "column 1: function size() is not supported: expressions may use"},
		"method":           {src: "usage.prompt_tokens.size()", want: "column 20: usage.prompt_tokens is a number"},
		"conversion":       {src: "int(usage.prompt_tokens)", want: "function int() is not supported"},
		"string":           {src: "usage.prompt_tokens + 'x'", want: "column 23: strings are not supported"},
		"index":            {src: "usage['prompt_tokens']", want: "column 6: lists and indexing are not supported"},
		"list":             {src: "[1, 2]", want: "lists and indexing are not supported"},
		"map":              {src: "{'a': 1}", want: "maps and messages are not supported"},
		"unsigned":         {src: "1u + 2u", want: "column 2: unsigned literals are not supported"},
		"unknown field":    {src: "usage.cost", want: "column 7: unknown field usage.cost: the fields are usage.prompt_tokens"},
		"unknown name":     {src: "request.size", want: "unknown name request"},
		"has of usage":     {src: "has(usage)", want: "expected a field"},
		"has of literal":   {src: "has(1)", want: "expected a field"},
		"dangling":         {src: "usage.prompt_tokens + -", want: "column 24: unexpected end of the expression"},
		"dangling compare": {src: "usage.prompt_tokens > ", want: "unexpected end"},
		"empty":            {src: "  // nothing\n", want: "the expression is empty"},
		"literal kinds":    {src: "1 + 2.0", want: "column 3: no matching overload for + applied to (int, double)"},
		"literal compare":  {src: "1 < 2.0", want: "no matching overload for < applied to (int, double)"},
		"bool equal int":   {src: "true == 1", want: "no matching overload for == applied to (bool, int)"},
		"chained compare":  {src: "1 > 2 > 3", want: "column 7: no matching overload for > applied to (bool, int)"},
		"not of int":       {src: "!1", want: "no matching overload for ! applied to (int)"},
		"ternary on int":   {src: "1 ? 2 : 3", want: "no matching overload for c ? a : b applied to (int, int, int)"},
		"ternary kinds":    {src: "true ? 1 : 2.0", want: "(bool, int, double)"},
		"double modulus":   {src: "usage.prompt_tokens % 2.0", want: "no matching overload for % applied to (double, double)"},
		"field modulus":    {src: "usage.prompt_tokens % usage.total_tokens", want: "column 21: no matching overload for % applied to (double, double)"},
		"field times int":  {src: "usage.completion_tokens * 2", want: "column 25: no matching overload for * applied to (double, int): int and double do not mix (the usage fields are doubles: write 2.0, not 2)"},
		"int plus field":   {src: "1 + usage.completion_tokens", want: "(int, double): int and double do not mix"},
		"fields times int": {src: "(usage.prompt_tokens + usage.completion_tokens) * 2", want: "write 2.0"},
		"negated field":    {src: "-usage.prompt_tokens * 2", want: "write 2.0"},
		"double then int":  {src: "usage.prompt_tokens * 2.0 > 1", want: "no matching overload for > applied to (double, int)"},
		"not of a field":   {src: "!usage.prompt_tokens", want: "column 1: no matching overload for ! applied to (double)"},
		"ternary on field": {src: "usage.prompt_tokens ? 1 : 2", want: "no matching overload for c ? a : b applied to (double, int, int)"},
		"and of a field":   {src: "usage.prompt_tokens && true", want: "no matching overload for && applied to (double, bool)"},
		"- then !":         {src: "-!true", want: `column 2: unexpected "!"`},
		"! then -":         {src: "!-usage.prompt_tokens", want: `column 2: unexpected "-"`},
		"run of - on min":  {src: "---9223372036854775808", want: "integer literal out of range"},
		"second line":      {src: "usage.prompt_tokens +\n  foo(1)", want: "line 2 column 3 of the expression: function foo()"},
		"out of range":     {src: "9223372036854775808", want: "integer literal out of range"},
		"trailing":         {src: "1 2", want: `column 3: unexpected "2"`},
		"upper-case hex":   {src: "0X10", want: "column 2: malformed number"},
		"hex of no digits": {src: "1 + 0x", want: "column 5: malformed number: 0x needs hex digits"},
		"vertical tab":     {src: "1 +\v1", want: `column 4: unexpected character '\v'`},
		"null":             {src: "null", want: "null is not supported"},
		"in":               {src: "1 in usage", want: `unexpected "in"`},
		"deep":             {src: strings.Repeat("(", 200) + "1" + strings.Repeat(")", 200), want: "nests deeper than 100"},
		"long":             {src: strings.Repeat("1 + ", 1000) + "1", want: "too long"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Parse(tc.src)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse(%q) error = %v, want one containing %q", tc.src, err, tc.want)
			}
		})
	}
}

// TestReport follows upstream's plugin: what is reported for a response.
func TestReport(t *testing.T) {
	cases := map[string]struct {
		expr, cond string
		u          Usage
		want       int64
		wantOK     bool
		wantErr    error
	}{
		"reported":           {expr: "usage.completion_tokens", cond: "has(usage.completion_tokens)", u: usage, want: 10, wantOK: true},
		"no condition":       {expr: "usage.prompt_tokens", u: usage, want: 32, wantOK: true},
		"zero is not":        {expr: "usage.completion_tokens", cond: "has(usage.completion_tokens)", u: Usage{}},
		"condition false":    {expr: "usage.prompt_tokens", cond: "usage.completion_tokens > 0", u: Usage{PromptTokens: 10}},
		"condition not bool": {expr: "usage.prompt_tokens", cond: "true ? usage.prompt_tokens : false", u: usage},
		"condition fails":    {expr: "usage.prompt_tokens", cond: "1 / 0 > 0", u: usage, wantErr: ErrDivByZero},
		"value fails":        {expr: "(true ? usage.prompt_tokens : 1) * 2", u: usage, wantErr: ErrMixed},
		"partial usage":      {expr: "(has(usage.prompt_tokens) ? usage.prompt_tokens : 0) + (has(usage.completion_tokens) ? usage.completion_tokens : 0)", u: Usage{CompletionTokens: 25}, want: 25, wantOK: true},
		"negative":           {expr: "usage.completion_tokens - usage.prompt_tokens", u: usage, want: -22, wantOK: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			a, err := NewAttribute("", "cost", tc.expr, tc.cond)
			if err != nil {
				t.Fatal(err)
			}
			got, ok, err := a.Report(&tc.u)
			if got != tc.want || ok != tc.wantOK || !errors.Is(err, tc.wantErr) {
				t.Errorf("Report() = %d, %t, %v; want %d, %t, %v", got, ok, err, tc.want, tc.wantOK, tc.wantErr)
			}
		})
	}
}

func TestNewAttribute(t *testing.T) {
	a, err := NewAttribute("", "x-cost", "usage.total_tokens", "")
	if err != nil || a.Namespace != DefaultNamespace || a.Condition != nil {
		t.Errorf("NewAttribute without namespace = %+v, %v; want namespace %s, no condition", a, err, DefaultNamespace)
	}
	for name, args := range map[string][4]string{
		"no name":          {"", "", "usage.total_tokens", ""},
		"no expression":    {"", "x", "", ""},
		"bool expression":  {"", "x", "usage.total_tokens > 1", ""},
		"number condition": {"", "x", "usage.total_tokens", "1 + 1"},
		"field condition":  {"", "x", "usage.total_tokens", "usage.completion_tokens"},
		"bad condition":    {"", "x", "usage.total_tokens", "usage.prompt_tokens > "},
		"bad expression":   {"", "x", "usage.prompt_tokens + -", ""},
	} {
		if _, err := NewAttribute(args[0], args[1], args[2], args[3]); err == nil {
			t.Errorf("%s: NewAttribute(%q) succeeded, want an error", name, args)
		}
	}
}

func TestEvalAllocatesNothing(t *testing.T) {
	a, err := NewAttribute("", "cost", "(has(usage.prompt_tokens) ? usage.prompt_tokens : 0) + usage.completion_tokens * 2.0 - 7.0 / usage.total_tokens", "usage.total_tokens > 0 && !(usage.prompt_tokens == 3)")
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _, _, _ = a.Report(&usage) }); n != 0 {
		t.Errorf("Report allocates %v times per response, want 0", n)
	}
}

// An int past 2^53 orders against a double by its exact value, as in CEL.
func TestCmpDoubleInt(t *testing.T) {
	if got := cmpDoubleInt(9007199254740992.0, 9007199254740993); got != -1 {
		t.Errorf("cmpDoubleInt(2^53, 2^53+1) = %d, want -1", got)
	}
	if got := cmpDoubleInt(0.5, 0); got != 1 {
		t.Errorf("cmpDoubleInt(0.5, 0) = %d, want 1", got)
	}
	if got := cmpDoubleInt(-1e300, math.MinInt64); got != -1 {
		t.Errorf("cmpDoubleInt(-1e300, MinInt64) = %d, want -1", got)
	}
}
