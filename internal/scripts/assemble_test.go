package scripts

import (
	"testing"
)

// assemble keeps the helpers a script calls, directly or through another
// helper, in their order, and nothing else: no helper it never calls, no
// comment line, no blank line. A "--" inside a string stays.
func TestAssembleKeepsOnlyWhatTheScriptCalls(t *testing.T) {
	helpers := `-- a comment
local function leaf(x)
  return x .. '--not a comment'
end

-- unused: nothing calls it
local function unused()
  return leaf(1)
end

local function mid(x)
  -- calls leaf
  return leaf(x)
end

local function top(x)
  return mid(x)
end
`
	body := `-- the script
local v = top('a')

return v
`
	got := assemble(helpers, body)
	want := `local function leaf(x)
  return x .. '--not a comment'
end
local function mid(x)
  return leaf(x)
end
local function top(x)
  return mid(x)
end
local v = top('a')
return v
`
	if got != want {
		t.Fatalf("assemble:\n%s\nwant:\n%s", got, want)
	}
}

// A top-level statement of the helpers that is not a function is kept where
// it stands, and what it calls too.
func TestAssembleKeepsOtherStatements(t *testing.T) {
	got := assemble("local function f()\n  return 1\nend\nlocal K = f()\n", "return K\n")
	if want := "local function f()\n  return 1\nend\nlocal K = f()\nreturn K\n"; got != want {
		t.Fatalf("assemble:\n%s\nwant:\n%s", got, want)
	}
}
