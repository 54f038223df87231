# mypy: disable-error-code="attr-defined,assignment,var-annotated,valid-type,misc,comparison-overlap"
# (a program without annotations, run alone in the sandbox: its values are deliberately untyped)
"""The program that runs candidate code: started (warm) inside the sandbox, used once.

This file is never imported by APE. :mod:`ape.tasks.checking.code.code_exec` reads its text and
runs it as ``python -I -c <text>``, so no path, key or channel appears in argv or in
the environment. It waits on stdin for one job (JSON, sent by the parent once a check
needs it), then:

1. reads the job, closes stdin, moves the result pipe to a random descriptor number
   and forgets the job text;
2. parses and compiles the candidate code and every test *before* any candidate code
   runs, and captures every function it reports with, so replacing ``json``,
   ``builtins.compile``, ``os.write`` or anything else later changes nothing;
3. applies the resource limits, installs an audit hook that refuses frame
   introspection, tracing, ``gc`` walks, ``ctypes`` and ``/proc``, and runs the code,
   then each test; every record it writes starts with the job's key, which the
   candidate never sees in argv, environment or any file.

The parent counts one record per test, in order, and only records with the key;
everything else (missing records, early exits, files) counts as not passed.

Results the candidate cannot fake. The tests run in the candidate's interpreter, so an
object the candidate returns could answer ``==`` (or ``hash``, ``bool``) as it likes. So
the candidate runs in a namespace of its own and the tests in another, which sees the
candidate's names through a guard: each of its functions the tests read becomes a
:func:`_guarded_call`, whose result is copied into exact builtin types (``int``, ``str``,
``float``, ``complex``, ``bool``, ``bytes``, ``None`` and ``list``, ``tuple``, ``dict``,
``set``, ``frozenset`` of them; a function it returns is guarded in turn) or refused; its
plain constants are copied, anything else the tests read is refused, as is a builtin name
it redefines that the tests use. A refusal fails the test with its reason even when the
test catches the exception. After every guarded call and around every test, the guard
also checks that the modules the tests import and the attributes they read of them are
the ones imported before the candidate ran, and that no thread of the candidate is left
running (it could rebind names while a test runs). Names a test statement binds (the
HumanEval preamble's helpers) are handed to the candidate, functions rebuilt on its
namespace, so they expose nothing of the tests' one.

The guard cannot be subverted from inside: it is a generator (:func:`_guard`) primed
before any candidate code runs, so every type and function it uses is a local of a frame
the candidate cannot reach (the audit hook refuses ``gi_frame``, frames and ``gc``),
unlike a closure's cells or a function's defaults; ``type(x) is int`` on those captured
references cannot be lied to by ``__class__``, a metaclass, or a patched ``builtins``,
``isinstance``, ``type`` or ``sys.modules``. The wrapper is bound to an immutable tuple
with ``types.MethodType``, reads no global or builtin name, and the audit hook refuses any
change of its ``__code__``. Its refusals are kept in the generator and handed only to a
query carrying a secret object the candidate never sees; a candidate that stops the
generator fails every test after. ``main`` reads no global name once candidate code has
run (a test disassembles it to check). What remains possible is code that runs at a time
of its choosing with no call of the tests on the stack: a signal handler or a finalizer.

Wire format of a record (one line): ``KEY S`` (the job arrived; sent before anything
else, so the parent can tell a sandbox that never started from code that failed, and
start the time limit there), ``KEY T <index> 1`` (test passed), ``KEY T <index> 0
<reason>`` (failed), ``KEY E <reason>`` (nothing more will run: the code or a setup
statement failed) or ``KEY D`` (all tests ran).
"""

import os
import sys


def _names(tree):  # noqa: C901 - one walk over the tests, for speed
    """What the tests name, in one walk of their syntax tree: ``(loaded, bound, watched)``.

    ``loaded``: per top-level statement, the names it reads (``x`` in ``f(x)``), at any
    depth. ``bound``: every name the tests bind anywhere (assigned, defined, imported, a
    parameter). ``watched``: ``(module, attributes)`` for each module the tests import,
    with the attributes they read of it (``math.fabs``) or import from it.
    """
    import ast

    name_node, attribute_node, argument, plain_import, from_import = (
        ast.Name,
        ast.Attribute,
        ast.arg,
        ast.Import,
        ast.ImportFrom,
    )
    definitions, load = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef), ast.Load
    loaded, bound, aliases, used, reads = [], set(), {}, {}, []
    for statement in tree.body:
        names = set()
        for node in ast.walk(statement):
            kind = type(node)
            if kind is name_node:
                (names if type(node.ctx) is load else bound).add(node.id)
            elif kind is attribute_node:
                if type(node.value) is name_node:
                    reads.append((node.value.id, node.attr))
            elif kind is argument:
                bound.add(node.arg)
            elif kind in definitions:
                bound.add(node.name)
            elif kind is plain_import:
                for alias in node.names:
                    top = alias.name.split(".")[0]
                    bound.add(alias.asname or top)
                    used.setdefault(alias.name, set())
                    aliases[alias.asname or top] = alias.name if alias.asname else top
            elif kind is from_import:
                bound.update(alias.asname or alias.name for alias in node.names)
                if not node.level and node.module and node.module != "__future__":
                    used.setdefault(node.module, set()).update(alias.name for alias in node.names)
        loaded.append(names)
    for alias, attribute in reads:
        if alias in aliases:
            used.setdefault(aliases[alias], set()).add(attribute)
    return loaded, bound, [(name, sorted(attributes)) for name, attributes in used.items()]


def _guarded_call(state, *args, **kwargs):
    """The tests' view of one of the candidate's functions: its result is checked and copied.

    Bound with ``types.MethodType`` to ``state = (function, guard.send, name)``, an immutable
    tuple, so nothing here is a closure cell or a default the candidate could rewrite; it
    reads no global or builtin name (the candidate may have replaced them: even the bare
    ``except`` names no class), and the audit hook refuses any change of its ``__code__``.
    """
    token = state[1]((0, state[2], args, kwargs))
    try:
        result = state[0](*args, **kwargs)
    except:  # noqa: E722 - a bare except looks up no name
        state[1]((2, token))
        raise
    answer = state[1]((1, token, result))
    if answer[0]:
        return answer[1]
    raise answer[1]


def _guard(snapshot, secret, modules, guarded_call, method_type):  # noqa: C901 - one loop over the guard's messages
    """The returned-value guard: a generator, primed before any candidate code runs.

    Every reference it uses is one of its locals, bound at priming: a running generator's
    frame is out of the candidate's reach (the audit hook refuses ``gi_frame``, frame
    walks and ``gc``), unlike a closure's cells or a function's defaults. Messages
    (``send``): ``(0, name, args, kwargs)`` before a guarded call, answered with a token;
    ``(1, token, result)`` after it, answered ``(True, copy)`` or ``(False, exception)``;
    ``(2, token)`` when the call raised; ``(4, value)``, answered ``(True, copy)`` or
    ``(False, what it is)``; ``(3, secret)`` from the harness alone: the refusals since the
    last such query (a candidate holding ``send`` cannot empty them without the secret);
    ``(5, secret, send)``, once: its own ``send``, so that a function a guarded call returns
    (``adder(2)``) is handed to the tests guarded in turn.
    """
    import _thread

    type_of, id_of, join, Error, Deep, Closing = type, id, "".join, BaseException, RecursionError, GeneratorExit
    name_of = type.__dict__["__name__"].__get__
    threads = _thread._count
    none_type, boolean, integer, floating, complex_type = type(None), bool, int, float, complex
    text, raw, list_type, tuple_type, dict_type, set_type, frozen = str, bytes, list, tuple, dict, set, frozenset
    items_of, get_from, pop_from, append, add_to, discard = (
        dict.items,
        dict.get,
        dict.pop,
        list.append,
        set.add,
        set.discard,
    )
    plain_words = "not plain data (numbers, strings, bytes, None, bools and lists, tuples, dicts and sets of them)"
    threads_at_start = threads()
    missing = object()

    class NotPlainData(Error):
        """Raised to the tests in place of a result the guard refused."""

    class Refused(Exception):
        pass

    def copy(value, memo, active):
        """An exact-type copy of ``value``, or Refused naming the first object that is not plain."""
        kind = type_of(value)
        if (
            kind is integer
            or kind is text
            or kind is boolean
            or kind is floating
            or kind is none_type
            or kind is raw
            or kind is complex_type
        ):
            return value
        key = id_of(value)
        done = get_from(memo, key, missing)
        if done is not missing:
            return done[1]
        if key in active:
            raise Refused("a " + name_of(kind) + " that contains itself")
        add_to(active, key)
        if kind is list_type:
            result = [copy(item, memo, active) for item in value]
        elif kind is tuple_type:
            result = tuple_type([copy(item, memo, active) for item in value])
        elif kind is dict_type:
            result = {}
            for item, entry in items_of(value):
                result[copy(item, memo, active)] = copy(entry, memo, active)
        elif kind is set_type:
            result = set_type([copy(item, memo, active) for item in value])
        elif kind is frozen:
            result = frozen([copy(item, memo, active) for item in value])
        else:
            raise Refused(join(("an object of type ", name_of(kind))))
        discard(active, key)
        memo[key] = (value, result)  # the original is kept alive so its id is not reused
        return result

    def plain(value):
        """(True, copy) or (False, what the first object that is not plain is)."""
        try:
            return True, copy(value, {}, set_type())
        except Refused as exc:
            return False, exc.args[0]
        except Deep:
            return False, "a value nested too deeply to check"
        except Error:
            return False, "a value that could not be checked"

    def environment():
        """What changed, since the candidate was given the job, in what the tests rely on."""
        found = []
        for name, module, namespace, attribute, value in snapshot:
            if get_from(modules, name) is not module:
                append(found, join(("the solution replaced the module ", name, ", which the tests use")))
            elif attribute is not None and get_from(namespace, attribute, missing) is not value:
                append(found, join(("the solution changed ", name, ".", attribute, ", which the tests use")))
        if threads() > threads_at_start:
            append(found, "the solution left a thread running; code_exec runs the tests with no other thread")
        return found

    is_callable, is_subclass = callable, issubclass
    calls, refused, answer, counter, tampered, send = {}, [], None, 0, False, None
    while True:
        try:
            message = yield answer
        except Closing:  # the interpreter ends, or candidate code closed it: the harness sees it stopped
            return
        except Error:  # gen.throw by candidate code that reached the guard
            tampered, answer = True, None
            continue
        answer = None
        try:
            kind = message[0]
            if kind == 0:
                counter += 1
                kept = []
                for argument in (*message[2], *message[3].values()):
                    if (
                        type_of(argument) is list_type
                        or type_of(argument) is dict_type
                        or type_of(argument) is set_type
                    ):
                        if plain(argument)[0]:
                            append(kept, argument)
                calls[counter] = (message[1], kept)
                answer = counter
            elif kind == 1 or kind == 2:
                name, kept = pop_from(calls, message[1])
                problems = []
                for argument in kept:
                    good, what = plain(argument)
                    if not good:
                        append(problems, join((name, "() put ", what, " into an argument it was given")))
                if kind == 1:
                    result = message[2]
                    sort = type_of(result)
                    if is_callable(result) and not is_subclass(sort, type_of) and send is not None:
                        good, what = True, method_type(guarded_call, (result, send, join((name, "()"))))
                    else:
                        good, what = plain(result)
                    if good:
                        answer = (True, what)
                    else:
                        append(problems, join((name, "() returned ", what, ", ", plain_words)))
                problems += environment()
                for problem in problems:
                    if problem not in refused:
                        append(refused, problem)
                if problems and kind == 1:
                    answer = (False, NotPlainData(problems[0]))
            elif kind == 3 and message[1] is secret:
                for problem in environment():
                    if problem not in refused:
                        append(refused, problem)
                if tampered:
                    append(refused, "candidate code stopped the check's guard")
                answer, refused = refused, []
            elif kind == 4:
                answer = plain(message[1])
            elif kind == 5 and message[1] is secret:
                send = message[2]
        except Error:
            tampered = True


def main():  # noqa: C901 - one straight line of setup, then the loop over tests
    read, write, close, dup2, urandom = os.read, os.write, os.close, os.dup2, os.urandom
    try:
        # a session (and process group) of its own: kill(0) by the candidate then reaches
        # nobody but itself, not the sandbox's launcher outside the namespace
        os.setsid()
    except OSError:
        pass  # already a session leader (bwrap --new-session, or no sandbox)
    # every builtin used once candidate code has run is bound here, before it can replace them
    run, Error, length, type_of, text_of = exec, BaseException, len, type, str
    chunks = []
    while True:
        chunk = read(0, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
    if not chunks:
        return  # the parent went away before giving a job
    # deferred on purpose: this program runs alone in the sandbox (never imported by APE) and
    # imports what it needs once its job has arrived
    import ast
    import json
    import resource
    import signal

    job = json.loads(b"".join(chunks).decode("utf-8"))
    del chunks
    key = job.pop("key").encode("ascii")
    fd = 3 + int.from_bytes(urandom(2), "little") % 900
    while fd == job["fd"]:
        fd += 1
    dup2(job["fd"], fd)
    close(job["fd"])
    try:  # the start record: the job is here and no candidate code has run yet
        write(fd, key + b" S\n")
    except OSError:
        pass
    null = os.open(os.devnull, os.O_RDONLY)
    dup2(null, 0)
    close(null)
    code, tests = job.pop("code"), job.pop("tests")
    limits = job.pop("limits")

    def clean(text, limit=500):
        text = text if length(text) <= limit else text[:limit] + "..."
        return text.replace("\n", " ").encode("utf-8", "replace")

    def describe(exc, where):
        try:
            name = type_of(exc).__name__
            detail = text_of(exc)
        except Error:  # a hostile __str__ or __name__
            return "an exception that cannot be described" + where
        return (name + ": " + detail if detail else name) + where

    streams = (sys.stdout, sys.stderr)

    def say(record):
        if record[:2] in (b" D", b" E"):  # the parent stops the sandbox on these: flush first
            for stream in streams:
                try:
                    stream.flush()
                except Error:
                    pass
        try:
            write(fd, key + record + b"\n")
        except OSError:
            pass

    try:
        tree = ast.parse(tests, "tests.py")
    except SyntaxError as exc:
        say(b" E " + clean("the tests do not parse: " + describe(exc, "")))
        return
    # the tests' leading `from __future__` imports go first in every statement compiled alone
    future = []
    for node in tree.body:
        if not (isinstance(node, ast.ImportFrom) and node.module == "__future__"):
            break
        future.append(node)
    statements = []
    for node in tree.body:
        body = [node] if node in future else [*future, node]
        statements.append((node, compile(ast.Module(body=body, type_ignores=[]), "tests.py", "exec")))
    loaded, bound, watched = _names(tree)
    units, count = [], 0
    if any(isinstance(node, ast.Assert) for node in tree.body):
        for (node, unit), names in zip(statements, loaded):  # each top-level assert is one test, the rest is setup
            number = count if isinstance(node, ast.Assert) else -1
            count += number >= 0
            units.append((number, [(node.lineno, unit)], names))
    elif tree.body:  # no top-level assert: the whole script is one test, run statement by statement
        count = 1
        units.append((0, [(node.lineno, unit) for node, unit in statements], set().union(*loaded)))
    loaded = set().union(*loaded)
    try:
        program = compile(code, "solution.py", "exec")
    except BaseException as exc:  # SyntaxError, ValueError (null bytes), RecursionError
        say(b" E " + clean("the code does not compile: " + describe(exc, "")))
        return
    passed_records = [b" T %d 1" % number for number in range(count)]
    failed_records = [b" T %d 0 " % number for number in range(count)]

    for name, value in (
        ("RLIMIT_AS", limits["memory_bytes"]),
        ("RLIMIT_CPU", limits["cpu_seconds"]),
        ("RLIMIT_FSIZE", limits["file_bytes"]),
        ("RLIMIT_NOFILE", limits["open_files"]),
        ("RLIMIT_NPROC", limits["processes"]),
        ("RLIMIT_CORE", 0),
    ):
        try:
            resource.setrlimit(getattr(resource, name), (value, value))
        except (AttributeError, ValueError, OSError):
            pass
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a full file is an error, not a kill
    os.chdir(job.pop("workdir"))
    del job, code, tests, tree

    blocked_events = frozenset(
        (
            "sys._getframe",
            "sys._current_frames",
            "sys._current_exceptions",
            "sys.settrace",
            "sys.setprofile",
            "gc.get_objects",
            "gc.get_referrers",
            "gc.get_referents",
            "ctypes.dlopen",
            "ctypes.dlsym",
            "ctypes.addressof",
            "ctypes.cdata",
            "ctypes.string_at",
            "ctypes.wstring_at",
            "ctypes.call_function",
        )
    )
    blocked_attributes = frozenset(("tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back"))

    def audit(
        event,
        args,
        blocked_events=blocked_events,
        blocked_attributes=blocked_attributes,
        length=length,
        is_a=isinstance,
        text=str,
        refuse=ValueError,
        deny=PermissionError,
        guarded=_guarded_call,
    ):
        if event in blocked_events:
            raise refuse("code_exec does not allow " + event)
        if event == "object.__getattr__" and length(args) > 1 and args[1] in blocked_attributes:
            raise refuse("code_exec does not allow reading " + args[1])
        if event == "open" and args and is_a(args[0], text) and args[0].startswith("/proc"):
            raise deny("code_exec does not allow opening " + args[0])
        if event == "object.__setattr__" and args and args[0] is guarded:
            raise refuse("code_exec does not allow changing its guard")

    sys.addaudithook(audit)
    import builtins
    import types

    pristine = dict(builtins.__dict__)  # the tests get a fresh copy of these before each test
    copy_of, items_of, keys_of, get_from, list_of = dict, dict.items, dict.keys, dict.get, list
    function_type, method_type, module_type = types.FunctionType, types.MethodType, types.ModuleType
    is_callable, is_subclass, text_type = callable, issubclass, str
    missing = object()
    # the modules and attributes the tests use, imported and noted before the candidate can touch them
    snapshot = []
    for name, attributes in watched:
        try:
            __import__(name)
            module = sys.modules[name]
        except Error:  # the tests will fail to import it themselves
            continue
        namespace_of = vars(module)
        snapshot.append((name, module, namespace_of, None, None))
        for attribute in attributes:
            if attribute in namespace_of:
                snapshot.append((name, module, namespace_of, attribute, namespace_of[attribute]))
    secret = object()  # only this function and the guard hold it: the candidate cannot drain the guard
    guarded_call = _guarded_call  # a global: the candidate could rebind it in __main__
    guard = _guard(tuple(snapshot), secret, sys.modules, guarded_call, method_type)
    next(guard)
    send = guard.send
    send((5, secret, send))  # its own send, for the functions a guarded call returns

    def refusals():
        """What the guard refused since the last call (candidate code may have stopped it)."""
        try:
            found = send((3, secret))
        except Error:
            return ["the check's guard was stopped by the candidate"]
        return found

    # the candidate runs in a namespace of its own; the tests see its names through the guard
    namespace = {"__name__": "solution", "__builtins__": copy_of(pristine)}
    try:
        run(program, namespace)
    except Error as exc:
        say(b" E " + clean("the code failed before the tests: " + describe(exc, "")))
        return
    tests_namespace = {"__name__": "solution"}
    poisoned = {}  # names the tests use that the candidate bound to something the tests may not see
    for name, value in list_of(items_of(namespace)):
        if type_of(name) is not text_type or name not in loaded or name in ("__builtins__", "__name__"):
            continue
        kind = type_of(value)
        if name in pristine and name not in bound and value is not pristine[name]:
            poisoned[name] = (
                "the solution defines " + name + ", a builtin name the tests use; code_exec lets no "
                "solution change what the tests' builtins mean (rename it)"
            )
        elif name in pristine and name not in bound:
            continue  # the builtin itself (`from builtins import abs`): the tests have it already
        elif is_subclass(kind, type_of) or kind is module_type:
            tests_namespace[name] = value  # a class or module: as it is
        elif is_callable(value):
            tests_namespace[name] = method_type(guarded_call, (value, send, name))
        else:
            answer = send((4, value))
            if answer[0]:
                tests_namespace[name] = answer[1]
            else:
                poisoned[name] = "the tests use " + name + ", which the solution bound to " + answer[1]

    def share(before):
        """Names a test statement bound, given to the candidate (functions rebound to its namespace)."""
        for name, value in list_of(items_of(tests_namespace)):
            if name == "__builtins__" or get_from(before, name, missing) is value:
                continue
            kind = type_of(value)
            if kind is function_type:
                rebound = function_type(
                    value.__code__, namespace, value.__name__, value.__defaults__, value.__closure__
                )
                rebound.__kwdefaults__ = value.__kwdefaults__
                rebound.__qualname__ = value.__qualname__
                value = rebound
            else:
                answer = send((4, value))
                if answer[0]:
                    value = answer[1]
            namespace[name] = value

    for number, statements, names in units:
        tests_namespace["__builtins__"] = copy_of(pristine)
        problem = None
        for name in keys_of(poisoned):
            if name in names:
                problem = poisoned[name]
                break
        refused = refusals()
        for line, unit in statements if problem is None and not refused else ():
            before = copy_of(tests_namespace)
            try:
                run(unit, tests_namespace)
            except Error as exc:
                problem = describe(exc, " (tests.py line %d)" % line)  # noqa: UP031 - no str methods in the sandbox
                break
            finally:
                share(before)
        refused = refused + refusals()
        if refused:
            problem = "; ".join(refused)
        if problem is None:
            if number >= 0:
                say(passed_records[number])
        elif number >= 0:
            say(failed_records[number] + clean(problem))
        else:
            say(b" E " + clean("test setup failed: " + problem))
            return
    say(b" D")


if __name__ == "__main__":  # run as `python -I -c <this text>`; importing it does nothing
    main()
