# The CPython C-API that aiosubinterp._core calls with raw pointers.
#
# Public names only. Cython's bundled cpython/*.pxd lacks the PEP 684 API
# (PyInterpreterConfig, Py_NewInterpreterFromConfig) and declares
# PyThreadState_Swap as unusable, so they are declared here. Everything is
# `nogil`: in this module "nogil" means "not holding the MAIN interpreter's
# GIL"; which GIL a call needs is said at each call site (`# GIL:` comments).

from cpython.object cimport PyObject

cdef extern from "Python.h" nogil:
    ctypedef struct PyInterpreterState:
        pass
    ctypedef struct PyThreadState:
        pass
    ctypedef struct PyStatus:
        pass
    ctypedef struct PyInterpreterConfig:
        int use_main_obmalloc
        int allow_fork
        int allow_exec
        int allow_threads
        int allow_daemon_threads
        int check_multi_interp_extensions
        int gil
    int PyInterpreterConfig_OWN_GIL

    PyStatus Py_NewInterpreterFromConfig(PyThreadState** tstate_p, const PyInterpreterConfig* config)
    int PyStatus_Exception(PyStatus status)
    void Py_EndInterpreter(PyThreadState* tstate)

    PyThreadState* PyThreadState_New(PyInterpreterState* interp)
    PyThreadState* PyThreadState_Get()
    PyThreadState* PyThreadState_Swap(PyThreadState* tstate)
    void PyThreadState_Clear(PyThreadState* tstate)
    void PyThreadState_DeleteCurrent()
    void PyThreadState_Delete(PyThreadState*)
    PyInterpreterState* PyThreadState_GetInterpreter(PyThreadState* tstate)
    PyThreadState* PyInterpreterState_ThreadHead(PyInterpreterState* interp)
    PyThreadState* PyThreadState_Next(PyThreadState* tstate)
    int PyThreadState_SetAsyncExc(unsigned long id, PyObject* exc)
    PyThreadState* PyEval_SaveThread()
    void PyEval_RestoreThread(PyThreadState* tstate)

    PyInterpreterState* PyInterpreterState_Get()
    PyInterpreterState* PyInterpreterState_Main()
    PyInterpreterState* PyInterpreterState_Head()
    PyInterpreterState* PyInterpreterState_Next(PyInterpreterState* interp)
    long long PyInterpreterState_GetID(PyInterpreterState* interp)

    unsigned long PyThread_get_thread_ident()

    int Py_file_input
    PyObject* PyDict_New()
    int PyDict_SetItemString(PyObject* d, const char* key, PyObject* value)
    PyObject* PyDict_GetItemString(PyObject* d, const char* key)
    PyObject* PyEval_GetBuiltins()
    PyObject* PyLong_FromSsize_t(Py_ssize_t v)
    PyObject* PyRun_String(const char* source, int start, PyObject* globals, PyObject* locals)
    const char* PyUnicode_AsUTF8AndSize(PyObject* s, Py_ssize_t* size)
    void Py_DecRef(PyObject* o)
    void PyErr_Print()
    void PyErr_Clear()
    PyObject* PyExc_KeyboardInterrupt

cdef extern from "Python.h":
    # One step under the container's own lock on a free-threaded build.
    object PyList_AsTuple(object lst)
    object PyDict_Copy(object d)
