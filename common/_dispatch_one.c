/*
 * common._storecore's dispatch of one plain record the put path has just appended: its
 * ConsumeQueue unit and its index keys in one call. One sender's every send is such a record,
 * dispatched right after its put; through Python (storage/dispatchers.py's
 * Dispatchers.dispatch_plain_pure: ConsumeQueue.put_message_position_info, then
 * IndexService.build_index and IndexFile.put_keys) its dispatch took about as long as the put.
 * And the units of a run of records of many queues (32 senders to a topic of many queues: a
 * queue a record), each its queue's next unit, in one call for the run.
 *
 * This reads and updates the same attributes those methods do, and writes the same bytes. It
 * takes only their common step: the next unit of the queue's last file, within its claimed
 * blocks; the keys in the last index file, within its claimed blocks. For anything else (a
 * queue not made yet, a new file, blocks to claim, a surrogate in the text, more keys than one
 * call takes) it returns None having changed nothing, and the caller goes the Python way.
 * Everything is read and checked before the first byte is written, with the interpreter lock
 * held throughout. So where the Python would write the unit and then fail in the index step
 * (an attribute missing, a mapping closed), this raises having written nothing; dispatch
 * retries either way. tests/unit/storage/test_dispatch_one.py holds the two ways to the same
 * bytes and attributes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_bytes.h"
#include "_dispatch_entry.h"
#include "_dispatch_one.h"
#include "_index_entry.h"
#include "_text.h"

#define MAX_ONE_KEYS 1024 /* as IndexFile.put_keys' compiled call: more go key by key */
#define SANE (1LL << 62)  /* offsets and counts past this are left to Python's ints */

enum {
    A_MAX_PHYSIC_OFFSET, A_MAPPED_FILE_QUEUE, A_MAPPED_FILES, A_WROTE_POSITION,
    A_FILE_FROM_OFFSET, A_ALLOCATED_POSITION, A_FILE_SIZE, A_WRITE_BUFFER, A_MM,
    A_LAST_INDEXED_OFFSET, A_INDEX_FILES, A_INDEX_COUNT, A_INDEX_NUM, A_HASH_SLOT_NUM,
    A_ENTRIES_BASE, A_MAPPED_FILE, A_BEGIN_TIMESTAMP, A_BEGIN_PHY_OFFSET, A_END_TIMESTAMP,
    A_END_PHY_OFFSET, A_HASH_SLOT_COUNT, A_COUNT
};

static const char *const attribute_names[A_COUNT] = {
    "max_physic_offset", "mapped_file_queue", "mapped_files", "wrote_position",
    "file_from_offset", "allocated_position", "file_size", "write_buffer", "mm",
    "last_indexed_offset", "index_files", "index_count", "index_num", "hash_slot_num",
    "_entries_base", "mapped_file", "begin_timestamp", "begin_phy_offset", "end_timestamp",
    "end_phy_offset", "hash_slot_count",
};

static PyObject *attributes[A_COUNT]; /* interned, made once */

/* Attribute `a` of `obj` as a long long in [0, SANE) (begin_timestamp may be anything an int
 * holds): 0 done, 1 when it is not such an int (the caller declines), -1 with an error set. */
static int
int_attribute(PyObject *obj, int a, long long *out, int any_sign)
{
    PyObject *value = PyObject_GetAttr(obj, attributes[a]);
    if (value == NULL)
        return -1;
    int rc = 0;
    if (!PyLong_CheckExact(value)) {
        rc = 1;
    }
    else {
        int overflow;
        *out = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (*out == -1 && PyErr_Occurred())
            rc = -1;
        else if (overflow || (!any_sign && (*out < 0 || *out >= SANE)))
            rc = 1;
    }
    Py_DECREF(value);
    return rc;
}

static int
set_int_attribute(PyObject *obj, int a, long long value)
{
    PyObject *v = PyLong_FromLongLong(value);
    if (v == NULL)
        return -1;
    int rc = PyObject_SetAttr(obj, attributes[a], v);
    Py_DECREF(v);
    return rc;
}

/* The last item of list attribute `a` of `obj`, a new reference; NULL with no error set when
 * the attribute is not a list or it is empty. */
static PyObject *
last_of(PyObject *obj, int a)
{
    PyObject *list = PyObject_GetAttr(obj, attributes[a]);
    if (list == NULL)
        return NULL;
    PyObject *last = NULL;
    if (PyList_CheckExact(list) && PyList_GET_SIZE(list) > 0) {
        last = PyList_GET_ITEM(list, PyList_GET_SIZE(list) - 1);
        Py_INCREF(last);
    }
    Py_DECREF(list);
    return last;
}

/* A writable view of attribute `a` of `obj` (a file's mapping) of at least `need` bytes:
 * 0 done, 1 when it is shorter (the caller declines), -1 with an error set. */
static int
mapping_of(PyObject *obj, int a, Py_buffer *view, long long need)
{
    PyObject *mm = PyObject_GetAttr(obj, attributes[a]);
    if (mm == NULL)
        return -1;
    int rc = PyObject_GetBuffer(mm, view, PyBUF_WRITABLE);
    Py_DECREF(mm); /* (the view holds the mapping) */
    if (rc < 0)
        return -1;
    if ((long long)view->len < need) {
        PyBuffer_Release(view);
        return 1;
    }
    return 0;
}

/* consume_queue_table[topic][queue_id], a new reference; NULL (no error set) when there is
 * none yet, or the key is not an exact str and int (whose own comparisons run no Python code:
 * an __eq__ that changed the table could free the queue under us). */
static PyObject *
queue_of(PyObject *table, PyObject *topic, PyObject *queue_id)
{
    if (!PyUnicode_CheckExact(topic) || !PyLong_CheckExact(queue_id))
        return NULL;
    PyObject *queues = PyDict_GetItemWithError(table, topic);
    if (queues == NULL || !PyDict_CheckExact(queues))
        return NULL;
    Py_INCREF(queues); /* (a stored key's __eq__ may still run, and take it out of the table) */
    PyObject *queue = PyDict_GetItemWithError(queues, queue_id);
    Py_XINCREF(queue);
    Py_DECREF(queues);
    return queue;
}

/* What the ConsumeQueue step needs, read and checked. */
typedef struct {
    int needed;           /* 0: the queue holds the record already (dispatched again) */
    PyObject *tail;       /* the queue's last file */
    long long position;   /* where the unit goes in it */
    Py_buffer view;
} UnitStep;

/* What the index step needs, read and checked. */
typedef struct {
    int needed;           /* 0: no keys, indexing off, or indexed already */
    PyObject *file;       /* the last index file */
    long long count, slot_num, slot_count, begin, time_diff;
    int first;            /* the file's first entries: they set its begin */
    int keys;
    uint32_t hashes[MAX_ONE_KEYS];
    Py_buffer view;
} IndexStep;

/* Read and check the unit's step: 0 ready, 1 decline, -1 error. */
static int
unit_step(PyObject *queue, long long offset, long long size, long long queue_offset,
          UnitStep *step)
{
    long long max_physic;
    int rc = int_attribute(queue, A_MAX_PHYSIC_OFFSET, &max_physic, 1);
    if (rc != 0)
        return rc;
    if (offset + size <= max_physic)
        return 0; /* put_message_position_info's first check: held already */
    step->needed = 1;
    PyObject *files_owner = PyObject_GetAttr(queue, attributes[A_MAPPED_FILE_QUEUE]);
    if (files_owner == NULL)
        return -1;
    step->tail = last_of(files_owner, A_MAPPED_FILES);
    Py_DECREF(files_owner);
    if (step->tail == NULL)
        return PyErr_Occurred() ? -1 : 1;
    /* The fast step of put_message_position_info: the next unit of the last file, claimed. */
    long long pos, from, allocated, file_size;
    if ((rc = int_attribute(step->tail, A_WROTE_POSITION, &pos, 0)) != 0
        || (rc = int_attribute(step->tail, A_FILE_FROM_OFFSET, &from, 0)) != 0
        || (rc = int_attribute(step->tail, A_ALLOCATED_POSITION, &allocated, 0)) != 0
        || (rc = int_attribute(step->tail, A_FILE_SIZE, &file_size, 0)) != 0)
        return rc;
    PyObject *write_buffer = PyObject_GetAttr(step->tail, attributes[A_WRITE_BUFFER]);
    if (write_buffer == NULL)
        return -1;
    int buffered = write_buffer != Py_None;
    Py_DECREF(write_buffer);
    if (buffered || pos == 0 || queue_offset * CQ_UNIT_SIZE != from + pos
        || pos + CQ_UNIT_SIZE > allocated || pos + CQ_UNIT_SIZE > file_size)
        return 1;
    step->position = pos;
    return mapping_of(step->tail, A_MM, &step->view, pos + CQ_UNIT_SIZE);
}

/* Write the unit a ready step found room for (its TAGS' hash as the tags code), and move the
 * file's and the queue's positions past it, as put_message_position_info does. Releases the
 * step's view. 0 done, -1 with an error set. */
static int
unit_write(UnitStep *step, PyObject *queue, long long offset, long long size,
           const char *found[P_COUNT], const Py_ssize_t found_len[P_COUNT])
{
    unsigned char *p = (unsigned char *)step->view.buf + step->position;
    int32_t tags_code = found[P_TAGS] == NULL ? 0 : (int32_t)java_hash_utf8(
        0, (const unsigned char *)found[P_TAGS], found_len[P_TAGS]);
    put_u64(p, (uint64_t)offset);
    put_u32(p + 8, (uint32_t)size);
    put_u64(p + 12, (uint64_t)(int64_t)tags_code);
    PyBuffer_Release(&step->view);
    step->view.obj = NULL;
    if (set_int_attribute(step->tail, A_WROTE_POSITION, step->position + CQ_UNIT_SIZE) < 0
        || set_int_attribute(queue, A_MAX_PHYSIC_OFFSET, offset + size) < 0)
        return -1;
    return 0;
}

/* Read and check the index step: 0 ready, 1 decline, -1 error. The keys are hashed here. */
static int
index_step(PyObject *index, PyObject *topic, const char *found[P_COUNT],
           const Py_ssize_t found_len[P_COUNT], long long offset, long long store_ts,
           IndexStep *step)
{
    long long last_indexed;
    int rc = int_attribute(index, A_LAST_INDEXED_OFFSET, &last_indexed, 1);
    if (rc != 0)
        return rc;
    if (offset <= last_indexed)
        return 0; /* build_index's first check: dispatched again after recovery */
    step->needed = 1;
    step->file = last_of(index, A_INDEX_FILES);
    if (step->file == NULL)
        return PyErr_Occurred() ? -1 : 1;
    long long index_num, entries_base, allocated;
    if ((rc = int_attribute(step->file, A_INDEX_COUNT, &step->count, 0)) != 0
        || (rc = int_attribute(step->file, A_INDEX_NUM, &index_num, 0)) != 0
        || (rc = int_attribute(step->file, A_HASH_SLOT_NUM, &step->slot_num, 0)) != 0
        || (rc = int_attribute(step->file, A_ENTRIES_BASE, &entries_base, 0)) != 0
        || (rc = int_attribute(step->file, A_HASH_SLOT_COUNT, &step->slot_count, 0)) != 0)
        return rc;
    if (step->count < 1 || step->count >= index_num || step->slot_num <= 0
        || step->slot_num > INT32_MAX || index_num > INT32_MAX
        || index_num > (SANE - entries_base) / INDEX_ENTRY_SIZE)
        return 1; /* full (build_index makes the next file), or not an index file's counts */
    PyObject *mapped_file = PyObject_GetAttr(step->file, attributes[A_MAPPED_FILE]);
    if (mapped_file == NULL)
        return -1;
    rc = int_attribute(mapped_file, A_ALLOCATED_POSITION, &allocated, 0);
    Py_DECREF(mapped_file);
    if (rc != 0)
        return rc;
    /* put_keys claims room for a UNIQ_KEY and every KEYS value before it writes. */
    long long most = step->count + 1;
    if (found[P_KEYS] != NULL) {
        most += 1;
        for (Py_ssize_t i = 0; i < found_len[P_KEYS]; i++)
            most += found[P_KEYS][i] == ' ';
    }
    if (most > index_num)
        most = index_num;
    if (entries_base + most * INDEX_ENTRY_SIZE > allocated)
        return 1; /* blocks to claim first */
    /* The keys, in build_index's order: UNIQ_KEY, then every non-empty KEYS value. */
    Py_ssize_t topic_len;
    const char *topic_text = PyUnicode_AsUTF8AndSize(topic, &topic_len);
    if (topic_text == NULL) {
        PyErr_Clear();
        return 1; /* (a surrogate: the pure hash copes) */
    }
    uint32_t seed = java_hash_utf8(0, (const unsigned char *)topic_text, topic_len) * 31 + '#';
    int keys = 0;
    if (found[P_UNIQ] != NULL)
        step->hashes[keys++] = java_hash_utf8(seed, (const unsigned char *)found[P_UNIQ],
                                              found_len[P_UNIQ]);
    const char *k = found[P_KEYS], *kend = k + found_len[P_KEYS];
    while (k != NULL && k < kend) {
        const char *space = memchr(k, ' ', (size_t)(kend - k));
        if (space == NULL)
            space = kend;
        if (space > k) {
            if (keys == MAX_ONE_KEYS)
                return 1;
            step->hashes[keys++] = java_hash_utf8(seed, (const unsigned char *)k, space - k);
        }
        k = space + 1;
    }
    if (step->count + keys > index_num)
        return 1; /* the rest go into the next file, key by key */
    step->keys = keys;
    step->first = step->count <= 1;
    if (step->first) {
        step->begin = store_ts;
    }
    else if ((rc = int_attribute(step->file, A_BEGIN_TIMESTAMP, &step->begin, 1)) != 0) {
        return rc;
    }
    /* Python's floor division of the difference, clamped to [0, Integer.MAX_VALUE] */
    unsigned long long later = step->begin > 0 && store_ts > step->begin
        ? ((unsigned long long)store_ts - (unsigned long long)step->begin) / 1000 : 0;
    step->time_diff = later > 0x7FFFFFFFull ? 0x7FFFFFFFLL : (long long)later;
    if (keys == 0)
        return 0;
    /* The mapping must hold what index_put_entry writes: entries after the slots that
     * hash_slot_num counts (_entries_base is only put_keys' claim, as in Python). */
    return mapping_of(step->file, A_MM, &step->view,
                      INDEX_HEADER_SIZE + step->slot_num * 4 + (step->count + keys) * INDEX_ENTRY_SIZE);
}

PyDoc_STRVAR(dispatch_plain_one_doc,
"dispatch_plain_one(entry, consume_queue_table, index_service, timed_topics) -> bool | None\n\n"
"Dispatch one entry of CommitLog.appended as storage.dispatchers.Dispatchers.dispatch_plain_pure\n"
"does: True once its ConsumeQueue unit and its index keys (none when index_service is None)\n"
"are in; False, having done nothing, for a record that is not plain (transaction bits, a\n"
"topic in timed_topics); None, having done nothing, where the Python way must take it.");

static PyObject *
dispatch_plain_one(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "dispatch_plain_one() takes 4 arguments");
        return NULL;
    }
    PyObject *entry = args[0], *table = args[1], *index = args[2], *timed = args[3];
    if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != ENTRY_FIELDS
        || !PyDict_CheckExact(table))
        Py_RETURN_NONE;
    int ok = 1;
    long long offset = entry_int(entry, 0, &ok), size = entry_int(entry, 1, &ok);
    long long store_ts = entry_int(entry, 2, &ok), queue_offset = entry_int(entry, 3, &ok);
    long long sys_flag = entry_int(entry, 6, &ok);
    PyObject *topic = PyTuple_GET_ITEM(entry, 4), *queue_id = PyTuple_GET_ITEM(entry, 5);
    if (!ok || !PyUnicode_CheckExact(topic))
        Py_RETURN_NONE;
    if (sys_flag & 0xC)
        Py_RETURN_FALSE;
    int is_timed = PySequence_Contains(timed, topic);
    if (is_timed < 0)
        return NULL;
    if (is_timed)
        Py_RETURN_FALSE;
    if (offset < 0 || offset >= SANE || size <= 0 || size > INT32_MAX || queue_offset < 0
        || queue_offset >= SANE / CQ_UNIT_SIZE)
        Py_RETURN_NONE;
    Py_ssize_t n;
    const char *props = entry_props(entry, &n);
    if (props == NULL)
        Py_RETURN_NONE;
    const char *found[P_COUNT];
    Py_ssize_t found_len[P_COUNT];
    scan_props(props, n, found, found_len);

    PyObject *queue = queue_of(table, topic, queue_id);
    if (queue == NULL) /* not made yet: find_consume_queue makes it */
        return PyErr_Occurred() ? NULL : (Py_INCREF(Py_None), Py_None);

    PyObject *result = NULL;
    UnitStep unit;
    unit.needed = 0;
    unit.tail = NULL;
    unit.view.obj = NULL;
    IndexStep step; /* (its hashes are written as they are found: not cleared) */
    IndexStep *keys = NULL;
    int rc = unit_step(queue, offset, size, queue_offset, &unit);
    if (rc == 0 && index != Py_None && (found[P_UNIQ] != NULL || found[P_KEYS] != NULL)) {
        keys = &step;
        keys->needed = keys->keys = 0;
        keys->file = NULL;
        keys->view.obj = NULL;
        rc = index_step(index, topic, found, found_len, offset, store_ts, keys);
    }
    if (rc != 0) {
        if (rc > 0) {
            result = Py_None;
            Py_INCREF(result);
        }
        goto done;
    }

    /* Everything is checked: write. The unit first, as dispatch_plain_pure does; a failure
     * after it (an attribute that cannot be set) leaves the queue holding the record, and the
     * retry skips it there. */
    if (unit.needed && unit_write(&unit, queue, offset, size, found, found_len) < 0)
        goto done;
    if (keys != NULL && keys->needed) {
        if (keys->keys > 0) {
            unsigned char *buf = (unsigned char *)keys->view.buf;
            long long count = keys->count;
            long new_slots = 0;
            for (int i = 0; i < keys->keys; i++)
                new_slots += index_put_entry(buf, keys->slot_num, count++,
                                             index_key_hash_of(keys->hashes[i]), offset,
                                             keys->time_diff);
            PyBuffer_Release(&keys->view);
            keys->view.obj = NULL;
            /* The header's fields, as put_keys sets them (the header reaches the mapping at
             * flush). */
            if ((keys->first && (set_int_attribute(keys->file, A_BEGIN_PHY_OFFSET, offset) < 0
                                 || set_int_attribute(keys->file, A_BEGIN_TIMESTAMP, store_ts) < 0))
                || set_int_attribute(keys->file, A_INDEX_COUNT, count) < 0
                || set_int_attribute(keys->file, A_HASH_SLOT_COUNT, keys->slot_count + new_slots) < 0
                || set_int_attribute(keys->file, A_END_PHY_OFFSET, offset) < 0
                || set_int_attribute(keys->file, A_END_TIMESTAMP, store_ts) < 0)
                goto done;
        }
        /* Only once every key is in, as in build_index. */
        if (set_int_attribute(index, A_LAST_INDEXED_OFFSET, offset) < 0)
            goto done;
    }
    result = Py_True;
    Py_INCREF(result);
done:
    if (unit.view.obj != NULL)
        PyBuffer_Release(&unit.view);
    Py_XDECREF(unit.tail);
    if (keys != NULL) {
        if (keys->view.obj != NULL)
            PyBuffer_Release(&keys->view);
        Py_XDECREF(keys->file);
    }
    Py_DECREF(queue);
    return result;
}

/* Where a run's units go in one queue: its last file, read once for the run when a unit of it
 * first needs writing, and how far the run has written into it. */
typedef struct {
    PyObject *queue;        /* (a new reference) */
    PyObject *tail;         /* its last file (new reference) once read and fit for units */
    Py_buffer view;         /* the file's mapping, while tail is set */
    long long max_physic;   /* the queue's max_physic_offset, as the run has moved it */
    long long position, from, limit;  /* the next unit's place; the file's offset; claimed end */
    int read;               /* the tail has been looked at */
    int stopped;            /* a unit was left: every later one of the queue is left too */
    int moved;              /* units written: positions to set at the end */
} RunQueue;

/* The run's RunQueue for `queue` (a new reference the cursor takes over): NULL with an error
 * set on failure. */
static RunQueue *
run_queue(RunQueue *queues, int *used, PyObject *queue)
{
    for (int q = 0; q < *used; q++) {
        if (queues[q].queue == queue) {
            Py_DECREF(queue);
            return &queues[q];
        }
    }
    RunQueue *cursor = &queues[(*used)++];
    cursor->queue = queue;
    cursor->tail = NULL;
    cursor->view.obj = NULL;
    cursor->read = cursor->moved = cursor->stopped = 0;
    int rc = int_attribute(queue, A_MAX_PHYSIC_OFFSET, &cursor->max_physic, 1);
    if (rc < 0)
        return NULL;
    if (rc > 0) { /* (not an int this reads: every unit of the queue left to Python) */
        cursor->max_physic = -1;
        cursor->stopped = 1;
    }
    return cursor;
}

/* Read the queue's last file for the run's units (only once one needs writing: a queue all of
 * whose units are held already is not looked at, as in Python): 0 done (cursor->tail set when
 * the fast step can be taken), -1 with an error set. */
static int
read_tail(RunQueue *cursor)
{
    cursor->read = 1;
    PyObject *files_owner = PyObject_GetAttr(cursor->queue, attributes[A_MAPPED_FILE_QUEUE]);
    if (files_owner == NULL)
        return -1;
    PyObject *tail = last_of(files_owner, A_MAPPED_FILES);
    Py_DECREF(files_owner);
    if (tail == NULL)
        return PyErr_Occurred() ? -1 : 0;
    long long pos, from, allocated, file_size;
    int rc;
    if ((rc = int_attribute(tail, A_WROTE_POSITION, &pos, 0)) != 0
        || (rc = int_attribute(tail, A_FILE_FROM_OFFSET, &from, 0)) != 0
        || (rc = int_attribute(tail, A_ALLOCATED_POSITION, &allocated, 0)) != 0
        || (rc = int_attribute(tail, A_FILE_SIZE, &file_size, 0)) != 0) {
        Py_DECREF(tail);
        return rc < 0 ? -1 : 0;
    }
    PyObject *write_buffer = PyObject_GetAttr(tail, attributes[A_WRITE_BUFFER]);
    if (write_buffer == NULL) {
        Py_DECREF(tail);
        return -1;
    }
    int buffered = write_buffer != Py_None;
    Py_DECREF(write_buffer);
    long long limit = allocated < file_size ? allocated : file_size;
    if (buffered || pos == 0 || pos + CQ_UNIT_SIZE > limit) {
        Py_DECREF(tail);
        return 0;
    }
    rc = mapping_of(tail, A_MM, &cursor->view, limit);
    if (rc != 0) {
        Py_DECREF(tail);
        return rc < 0 ? -1 : 0;
    }
    cursor->tail = tail;
    cursor->position = pos;
    cursor->from = from;
    cursor->limit = limit;
    return 0;
}

PyDoc_STRVAR(units_each_doc,
"dispatch_units_each(entries, count, consume_queue_table) -> list[int]\n\n"
"The ConsumeQueue unit of each of entries[:count] (a run of plain records of one topic, of\n"
"any queues: storage/dispatch_runs.py), written into its own queue's last file as\n"
"dispatch_plain_one writes it. Returns, in log order, the indices of the entries it left\n"
"(their queue not made yet, a new file, blocks to claim, and after one of those every later\n"
"entry of that queue; after an entry whose queue cannot be told, every later entry): the\n"
"caller puts those the Python way, in that order.");

/* (a run is at most storage.dispatch.MAX_RUN records; more queues than this are left) */
#define RUN_QUEUES 256

static PyObject *
dispatch_units_each(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 3 || !PyList_Check(args[0]) || !PyDict_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError,
                        "dispatch_units_each(entries: list, count, consume_queue_table: dict)");
        return NULL;
    }
    PyObject *table = args[2];
    Py_ssize_t count;
    if (ssize_arg(args[1], &count) < 0)
        return NULL;
    if (count < 0 || count > PyList_GET_SIZE(args[0])) {
        PyErr_SetString(PyExc_ValueError, "count is not within the entries");
        return NULL;
    }
    /* Our own list of the entries: an attribute read may run Python code (a subclass's
     * property), which must not shrink the list or free an entry under us. */
    PyObject *run = PyList_GetSlice(args[0], 0, count);
    if (run == NULL)
        return NULL;
    PyObject *left = PyList_New(0);
    /* (a cursor a queue: never more than the run's entries) */
    Py_ssize_t most = count < RUN_QUEUES ? (count > 0 ? count : 1) : RUN_QUEUES;
    RunQueue *queues = left == NULL ? NULL : PyMem_Malloc(sizeof(RunQueue) * (size_t)most);
    if (queues == NULL) {
        Py_XDECREF(left);
        Py_DECREF(run);
        return left == NULL ? NULL : PyErr_NoMemory();
    }
    int used = 0, failed = 0;
    int lost = 0; /* an entry whose queue could not be told was left: so is everything after */
    /* Each unit is written as its queue's next one; each queue's positions are set once, at
     * the end (the lock is held throughout: nobody sees them in between). */
    for (Py_ssize_t i = 0; i < count && !failed; i++) {
        PyObject *entry = PyList_GET_ITEM(run, i);
        int ok = !lost && PyTuple_CheckExact(entry) && PyTuple_GET_SIZE(entry) == ENTRY_FIELDS;
        long long offset = ok ? entry_int(entry, 0, &ok) : 0;
        long long size = ok ? entry_int(entry, 1, &ok) : 0;
        long long queue_offset = ok ? entry_int(entry, 3, &ok) : 0;
        RunQueue *cursor = NULL;
        if (ok && PyUnicode_CheckExact(PyTuple_GET_ITEM(entry, 4))
            && PyLong_CheckExact(PyTuple_GET_ITEM(entry, 5))) {
            PyObject *queue = queue_of(table, PyTuple_GET_ITEM(entry, 4),
                                       PyTuple_GET_ITEM(entry, 5));
            if (queue == NULL && PyErr_Occurred()) {
                failed = 1;
                break;
            }
            if (queue != NULL && used == most) {
                int known = 0;
                for (int q = 0; q < used && !known; q++)
                    known = queues[q].queue == queue;
                if (!known) { /* (this queue, like one not made yet: all its units left) */
                    Py_DECREF(queue);
                    queue = NULL;
                }
            }
            if (queue != NULL && (cursor = run_queue(queues, &used, queue)) == NULL) {
                failed = 1;
                break;
            }
        }
        else {
            lost = 1;
        }
        Py_ssize_t n = 0;
        const char *props = cursor != NULL ? entry_props(entry, &n) : NULL;
        int usable = props != NULL && offset >= 0 && offset < SANE && size > 0
            && size <= INT32_MAX && queue_offset >= 0 && queue_offset < SANE / CQ_UNIT_SIZE;
        if (usable && !cursor->stopped) {
            if (offset + size <= cursor->max_physic)
                continue; /* put_message_position_info's first check: held already */
            if (!cursor->read && read_tail(cursor) < 0) {
                failed = 1;
                break;
            }
            long long pos = cursor->tail != NULL ? cursor->position : -1;
            if (pos > 0 && queue_offset * CQ_UNIT_SIZE == cursor->from + pos
                && pos + CQ_UNIT_SIZE <= cursor->limit) {
                const char *found[P_COUNT];
                Py_ssize_t found_len[P_COUNT];
                scan_props(props, n, found, found_len);
                unsigned char *p = (unsigned char *)cursor->view.buf + pos;
                int32_t tags_code = found[P_TAGS] == NULL ? 0 : (int32_t)java_hash_utf8(
                    0, (const unsigned char *)found[P_TAGS], found_len[P_TAGS]);
                put_u64(p, (uint64_t)offset);
                put_u32(p + 8, (uint32_t)size);
                put_u64(p + 12, (uint64_t)(int64_t)tags_code);
                cursor->position = pos + CQ_UNIT_SIZE;
                cursor->max_physic = offset + size;
                cursor->moved = 1;
                continue;
            }
        }
        /* Left to Python; and so is every later unit of its queue, which Python must put
         * after this one. */
        if (cursor != NULL)
            cursor->stopped = 1;
        PyObject *index = PyLong_FromSsize_t(i);
        if (index == NULL || PyList_Append(left, index) < 0)
            failed = 1;
        Py_XDECREF(index);
    }
    for (int q = 0; q < used; q++) {
        RunQueue *cursor = &queues[q];
        if (cursor->view.obj != NULL)
            PyBuffer_Release(&cursor->view);
        /* As put_message_position_info moves them after each unit (the file's, then the
         * queue's): a failure before here leaves them where a retry writes the same units. */
        if (cursor->moved && !failed
            && (set_int_attribute(cursor->tail, A_WROTE_POSITION, cursor->position) < 0
                || set_int_attribute(cursor->queue, A_MAX_PHYSIC_OFFSET, cursor->max_physic) < 0))
            failed = 1;
        Py_XDECREF(cursor->tail);
        Py_DECREF(cursor->queue);
    }
    PyMem_Free(queues);
    Py_DECREF(run);
    if (failed) {
        Py_DECREF(left);
        return NULL;
    }
    return left;
}

static PyMethodDef dispatch_one_methods[] = {
    {"dispatch_plain_one", (PyCFunction)(void (*)(void))dispatch_plain_one, METH_FASTCALL,
     dispatch_plain_one_doc},
    {"dispatch_units_each", (PyCFunction)(void (*)(void))dispatch_units_each, METH_FASTCALL,
     units_each_doc},
    {NULL, NULL, 0, NULL},
};

int
dispatch_one_add_functions(PyObject *module)
{
    for (int a = 0; a < A_COUNT; a++) {
        if (attributes[a] == NULL && (attributes[a] = PyUnicode_InternFromString(attribute_names[a])) == NULL)
            return -1;
    }
    return PyModule_AddFunctions(module, dispatch_one_methods);
}
