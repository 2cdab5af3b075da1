"""Build an execute-only ELF of a one-file Python program: the interpreter embedded, the program's
compiled code inside the binary (never in a readable file)."""
from __future__ import annotations
import marshal, subprocess, sys, sysconfig, tempfile
from pathlib import Path

C = r'''
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <marshal.h>
static const unsigned char code[] = {%(bytes)s};
int main(int argc, char **argv) {
    PyStatus st;
    PyPreConfig pre;
    PyPreConfig_InitIsolatedConfig(&pre);
    pre.utf8_mode = 1;
    st = Py_PreInitialize(&pre);
    if (PyStatus_Exception(st)) Py_ExitStatusException(st);
    PyConfig config;
    PyConfig_InitIsolatedConfig(&config);
    config.site_import = 0;
    config.write_bytecode = 0;
    config.parse_argv = 0;
    config.inspect = 0;
    config.interactive = 0;
    config.buffered_stdio = 1;
    st = PyConfig_SetBytesString(&config, &config.home, %(home)s);
    if (PyStatus_Exception(st)) goto fail;
    st = PyConfig_SetBytesString(&config, &config.program_name, %(name)s);
    if (PyStatus_Exception(st)) goto fail;
    st = PyConfig_SetBytesArgv(&config, argc, argv);
    if (PyStatus_Exception(st)) goto fail;
    st = Py_InitializeFromConfig(&config);
    if (PyStatus_Exception(st)) goto fail;
    PyConfig_Clear(&config);
    PyObject *co = PyMarshal_ReadObjectFromString((const char *)code, sizeof(code));
    if (co == NULL) { PyErr_Print(); return 1; }
    PyObject *m = PyImport_AddModule("__main__");
    PyObject *d = PyModule_GetDict(m);
    PyObject *r = PyEval_EvalCode(co, d, d);
    if (r == NULL) { PyErr_Print(); return 1; }   /* SystemExit: PyErr_Print exits with its code */
    Py_DECREF(r);
    return Py_FinalizeEx() < 0 ? 120 : 0;
fail:
    PyConfig_Clear(&config);
    Py_ExitStatusException(st);
}
'''
def cstr(s): return '"' + s.replace('\\','\\\\').replace('"','\\"') + '"'
def build(src: Path, out: Path, name: str):
    code = compile(src.read_text(encoding="utf-8"), f"{name}/__main__.py", "exec", optimize=2, dont_inherit=True)
    data = marshal.dumps(code)
    cfg = sysconfig.get_config_var
    with tempfile.TemporaryDirectory() as tmp:
        c = Path(tmp)/"main.c"
        c.write_text(C % {"bytes": ",".join(map(str, data)), "home": cstr(sys.base_prefix), "name": cstr(name)})
        inc = sysconfig.get_paths()["include"]
        libdir = cfg("LIBDIR")
        ver = cfg("LDVERSION")
        cmd = ["gcc", "-O1", "-s", "-o", str(out), str(c), f"-I{inc}", f"-L{libdir}", f"-lpython{ver}",
               f"-Wl,-rpath,{libdir}", "-lm"]
        subprocess.run(cmd, check=True)
    out.chmod(0o111)
if __name__ == "__main__":
    build(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3])
