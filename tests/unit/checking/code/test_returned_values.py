"""code_exec: a value that reaches the tests from the candidate is plain data, or the test fails.

Each hostile solution returns (or plants) an object that would pass the comparison on its
own; every one must score 0, while honest solutions that return lists, tuples, dicts,
sets, floats, None and nested mixes still pass. The candidate runs in a process of its own
and only plain data crosses back to the tests' process, so these run without a sandbox
(the boundary is the harness's, the same in every sandbox); the always-equal object also
runs in each sandbox this machine has.
"""

from __future__ import annotations

import sys

import pytest

from ape.tasks.checking.code.code_exec import run_code
from tests.helpers.sandbox_kinds import KINDS

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandboxes need Linux")

FAST = {"timeout_s": 5.0, "memory_mb": 256, "sandbox": "none"}
PLAIN = "not plain data"

ALWAYS_EQUAL = """
class AlwaysEqual:
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    __hash__ = object.__hash__
"""
# one right and one wrong expectation: an honest `add` scores 0.5, a forgery more
TESTS = "assert add(1, 2) == 3\nassert add(2, 2) == 5\n"
HUMANEVAL_STYLE = (
    "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(2, 2) == 5\n\ncheck(add)\n"
)

HOSTILE = {
    "always_equal": ALWAYS_EQUAL + "def add(a, b):\n    return AlwaysEqual()\n",
    "str_subclass": (
        "class Text(str):\n    def __eq__(self, other):\n        return True\n    __hash__ = str.__hash__\n"
        "def add(a, b):\n    return Text('3')\n"
    ),
    "int_subclass": (
        "class Number(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n"
        "def add(a, b):\n    return Number(a + b)\n"
    ),
    "float_subclass_bool": (
        "class Truthy(float):\n    def __eq__(self, other):\n        return True\n    def __bool__(self):\n"
        "        return True\n    __hash__ = float.__hash__\n"
        "def add(a, b):\n    return Truthy(0.0)\n"
    ),
    "list_subclass": (
        "class Items(list):\n    def __eq__(self, other):\n        return True\n"
        "def add(a, b):\n    return Items([a + b])\n"
    ),
    "getattr_proxy": (
        ALWAYS_EQUAL + "class Proxy:\n    def __init__(self, value):\n        self._value = value\n"
        "    def __getattr__(self, name):\n        return getattr(self._value, name)\n"
        "    __eq__ = AlwaysEqual.__eq__\n    __hash__ = object.__hash__\n"
        "def add(a, b):\n    return Proxy(a + b)\n"
    ),
    "class_swap": (  # isinstance(x, int) says yes: __class__ lies, type() does not
        ALWAYS_EQUAL + "class Liar(AlwaysEqual):\n    @property\n    def __class__(self):\n        return int\n"
        "def add(a, b):\n    return Liar()\n"
    ),
    "patches_builtins_before_returning": (
        ALWAYS_EQUAL + "import builtins, sys\n"
        "def add(a, b):\n"
        "    builtins.type = lambda *args: int\n"
        "    builtins.isinstance = lambda *args: True\n"
        "    builtins.issubclass = lambda *args: True\n"
        "    globals()['__builtins__']['type'] = lambda *args: int\n"
        "    sys.modules['types'] = None\n"
        "    return AlwaysEqual()\n"
    ),
    "patches_the_guard": (
        ALWAYS_EQUAL + "import sys\nmain = sys.modules['__main__']\n"
        "def passthrough(state, *args, **kwargs):\n    return state[0](*args, **kwargs)\n"
        "for name in dir(main):\n"
        "    value = getattr(main, name)\n"
        "    for attribute in ('__code__', '__defaults__', '__kwdefaults__'):\n"
        "        try:\n"
        "            setattr(value, attribute, passthrough.__code__ if attribute == '__code__' else None)\n"
        "        except Exception:\n"
        "            pass\n"
        "    try:\n"
        "        setattr(main, name, passthrough)\n"
        "    except Exception:\n"
        "        pass\n"
        "def add(a, b):\n    return AlwaysEqual()\n"
    ),
    "nested_in_a_list": ALWAYS_EQUAL + "def add(a, b):\n    return [AlwaysEqual()][0] if False else [AlwaysEqual()]\n",
    "nested_in_a_dict": ALWAYS_EQUAL + "def add(a, b):\n    return {'sum': (a + b, AlwaysEqual())}\n",
}
# the nested ones return a container, so the comparison with 3 fails anyway: compare what
# they return with what the test expects from their shape
NESTED_TESTS = {
    "nested_in_a_list": "assert add(1, 2) == [3]\nassert add(2, 2) == [5]\n",
    "nested_in_a_dict": "assert add(1, 2) == {'sum': (3, 3)}\nassert add(2, 2) == {'sum': (4, 5)}\n",
}


# patching its own builtins or the harness's functions breaks the candidate's own process,
# which then sends nothing readable: the tests fail with that reason instead
BREAKS_ITS_OWN_PROCESS = {"patches_builtins_before_returning", "patches_the_guard"}


@pytest.mark.parametrize("name", sorted(HOSTILE))
@pytest.mark.parametrize("shape", ["asserts", "check_function"])
def test_an_object_that_fools_the_comparison_scores_zero_with_the_reason(name: str, shape: str) -> None:
    tests = NESTED_TESTS.get(name, TESTS) if shape == "asserts" else HUMANEVAL_STYLE
    if name in NESTED_TESTS and shape != "asserts":
        tests = tests.replace("candidate(1, 2) == 3", "candidate(1, 2) == [3]")
    result = run_code(HOSTILE[name], tests, **FAST)
    assert result.score == 0.0, result
    if name in BREAKS_ITS_OWN_PROCESS:
        assert "the solution process" in said(result), result
        return
    assert result.failures and all("add() returned an object of type" in f for f in result.failures), result
    assert PLAIN in result.failures[0]


@pytest.mark.parametrize("kind", [*KINDS, "none"])
def test_the_always_equal_object_fails_in_every_sandbox(kind: str) -> None:
    result = run_code(HOSTILE["always_equal"], TESTS, timeout_s=5.0, memory_mb=256, sandbox=kind)
    assert (result.passed, result.total) == (0, 2)
    assert "add() returned an object of type AlwaysEqual, not plain data" in result.failures[0]


def said(result) -> str:
    """The failures and the error of a result: a refusal during a setup statement is the error."""
    return " ".join([*result.failures, result.error or ""])


def test_a_test_that_swallows_the_refusal_still_fails() -> None:
    tests = "def check():\n    try:\n        r = add(1, 2)\n    except BaseException:\n        r = 3\n    assert r == 3\n\ncheck()\n"
    result = run_code(HOSTILE["always_equal"], tests, **FAST)
    assert result.score == 0.0 and "returned an object of type AlwaysEqual" in said(result)


def test_an_argument_filled_with_a_fake_fails() -> None:
    code = ALWAYS_EQUAL + "def sort_in_place(xs):\n    xs[:] = [AlwaysEqual()]\n"
    result = run_code(code, "xs = [3, 1]\nsort_in_place(xs)\nassert xs == [1, 3]\n", **FAST)
    assert result.score == 0.0
    assert "sort_in_place() put an object of type AlwaysEqual into an argument" in said(result)


def test_a_fake_bound_to_a_name_the_tests_read_fails() -> None:
    result = run_code(ALWAYS_EQUAL + "ANSWER = AlwaysEqual()\n", "assert ANSWER == 42\n", **FAST)
    assert result.score == 0.0
    assert "the tests use ANSWER, which the solution bound to an object of type AlwaysEqual" in result.failures[0]


def test_shadowing_a_builtin_the_tests_use_fails() -> None:
    code = "def abs(x):\n    return 0\n\ndef half(x):\n    return 7.0\n"
    result = run_code(code, "assert abs(half(1.0) - 0.5) < 1e-6\n", **FAST)
    assert result.score == 0.0 and "the solution defines abs, a builtin name the tests use" in result.failures[0]


def test_patching_a_module_in_its_process_does_not_reach_the_tests() -> None:
    code = "import math\nmath.fabs = lambda x: 0.0\n\ndef root(x):\n    return 12.0\n"
    result = run_code(code, "import math\nassert math.fabs(root(4.0) - 2.0) < 1e-6\n", **FAST)
    assert result.score == 0.0 and result.failures == ["AssertionError (tests.py line 2)"], result
    swapped = "import sys, types\nfake = types.ModuleType('math')\nfake.fabs = lambda x: 0.0\n"
    swapped += "sys.modules['math'] = fake\n\ndef root(x):\n    return 12.0\n"
    result = run_code(swapped, "import math\nassert math.fabs(root(4.0) - 2.0) < 1e-6\n", **FAST)
    assert result.score == 0.0 and result.failures == ["AssertionError (tests.py line 2)"], result


def test_rebinding_its_own_names_during_a_call_does_not_reach_the_tests() -> None:
    code = ALWAYS_EQUAL + "def add(a, b):\n    globals()['add'] = lambda a, b: AlwaysEqual()\n    return a + b\n"
    result = run_code(code, "assert add(1, 2) == 3 and add(2, 2) == 5\nassert add(1, 1) == 2\n", **FAST)
    assert (result.passed, result.total) == (1, 2), result  # the tests still call the add they were given


def test_a_thread_left_running_changes_nothing() -> None:
    code = "import threading, time\n\ndef add(a, b):\n"
    code += "    threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n    return a + b\n"
    result = run_code(code, "assert add(1, 2) == 3\nassert add(2, 2) == 5\n", **FAST)
    assert (result.passed, result.total) == (1, 2), result


def test_a_function_of_the_tests_is_not_handed_to_the_solution() -> None:
    code = "def apply(fn):\n    return fn(1, 2)\n\ndef add(a, b):\n    return a + b\n"
    result = run_code(code, "assert apply(add) == 3\nassert add(1, 2) == 3\n", **FAST)
    assert (result.passed, result.total) == (1, 2), result
    assert "apply() was given an object of type function" in result.failures[0]


def test_an_instance_of_the_solutions_class_crosses_as_its_attributes_only() -> None:
    """Methods and plain attributes cross; comparing the instance itself is the tests' own identity."""
    code = (
        ALWAYS_EQUAL
        + "class Box:\n    def __init__(self):\n        self.items = [1]\n        self.fake = AlwaysEqual()\n"
    )
    code += "    def __eq__(self, other):\n        return True\n    def get(self):\n        return AlwaysEqual()\n"
    tests = "b = Box()\nassert b.items == [1]\nassert b == 3\nassert b.fake == 3\nassert b.get() == 3\n"
    result = run_code(code, tests, **FAST)
    assert (result.passed, result.total) == (1, 4), result
    assert "Box().fake returned an object of type AlwaysEqual" in result.failures[1], result
    assert "Box().get() returned an object of type AlwaysEqual" in result.failures[2], result


def test_the_solutions_exceptions_reach_the_tests_as_builtin_exceptions() -> None:
    code = "class Odd(Exception):\n    pass\n\ndef parse(s):\n    if s == 'odd':\n        raise Odd('strange')\n    return int(s)\n"
    tests = (
        "try:\n    parse('x')\n    raise AssertionError('no error')\nexcept ValueError as exc:\n    assert 'invalid literal' in str(exc)\n"
        "assert parse('4') == 4\n"
        "try:\n    parse('odd')\nexcept Exception as exc:\n    assert str(exc) == 'Odd: strange', exc\n"
        "assert parse('5') == 5\n"
    )
    result = run_code(code, tests, **FAST)
    assert result.score == 1.0, result


HONEST = {
    "nested plain data": (
        "def f(x):\n    shared = [x, x]\n"
        "    return {'a': [1, 2.5, None, True], 'b': (shared, shared), 'c': {1, 2}, 'd': frozenset({'x'}), "
        "'e': b'raw', 'f': 1j, 'g': float('nan') != float('nan')}\n",
        "r = f(3)\nassert r['a'] == [1, 2.5, None, True] and r['b'] == ([3, 3], [3, 3])\n"
        "assert r['c'] == {1, 2} and r['d'] == frozenset({'x'}) and r['e'] == b'raw' and r['f'] == 1j and r['g']\n",
    ),
    "recursion and helpers with objects of their own": (
        "class Node:\n    def __init__(self, value):\n        self.value = value\n\n"
        "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n\n"
        "def total(xs):\n    return sum(Node(x).value for x in xs)\n",
        "assert fib(15) == 610\nassert total([1, 2, 3]) == 6\n",
    ),
    "a helper from the tests": (
        "def twice_shout(s):\n    return shout(s) * 2\n",
        "def shout(s):\n    return s.upper()\n\ndef check(candidate):\n    assert candidate('a') == 'AA'\n\n"
        "check(twice_shout)\n",
    ),
    "a class the tests use": (
        "class Stack:\n    def __init__(self):\n        self.items = []\n"
        "    def push(self, x):\n        self.items.append(x)\n    def pop(self):\n        return self.items.pop()\n",
        "s = Stack()\ns.push(4)\nassert s.pop() == 4 and s.items == []\n",
    ),
    "a module it imported, which the tests use without importing it": (
        "import os\n\ndef here():\n    return os.getcwd()\n",
        "assert here() == os.getcwd()\n",
    ),
    "a function it returns": (
        "def adder(n):\n    return lambda x: x + n\n",
        "assert adder(2)(3) == 5\n",
    ),
    "its constants and its in-place sort": (
        "LIMIT = [1, 2]\n\ndef sort_in_place(xs):\n    xs.sort()\n",
        "xs = [3, 1]\nsort_in_place(xs)\nassert xs == [1, 3] and LIMIT == [1, 2]\n",
    ),
}


@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_solutions_still_pass(name: str) -> None:
    code, tests = HONEST[name]
    result = run_code(code, tests, **FAST)
    assert result.score == 1.0, result
