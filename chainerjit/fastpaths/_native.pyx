# cython: language_level=3, boundscheck=False, wraparound=False
"""The fast paths' C: backprop through a graph that holds chainerjit nodes
(``fastpaths.backprop``) and the optimizer update (``fastpaths.
optimizers``). Those modules document them."""

import heapq

import chainer
from chainer import _backprop_utils
import numpy

from chainerjit.frontend import _keys
from chainerjit.runtime._calls cimport _nodes
from chainerjit.runtime._calls cimport debug_or_function_hooks
from chainerjit.runtime._calls cimport new_variable

cdef object _ndarray = numpy.ndarray
cdef object _Variable = chainer.Variable
cdef object _FunctionNode = chainer.FunctionNode
cdef object _local = chainer.config._local
cdef object _ABSENT = _keys.ABSENT


# --- backprop through jitted nodes (``backprop``) ---------------------------

cdef object _heappush = heapq.heappush
cdef object _heappop = heapq.heappop
cdef object _plain_backward_accumulate = _FunctionNode.backward_accumulate
cdef object _check_grad_type = chainer.variable._check_grad_type


cpdef bint lean_backward(object loss, object loss_scale):
    """``loss.backward(loss_scale=loss_scale)`` (no retained gradients,
    no double backprop) as Chainer 7's ``Variable.backward`` and
    ``_backprop_to_all`` run it, without their steps that do nothing here,
    where the graph holds a chainerjit node (see :func:`_lean_graph`).
    Returns False, having done nothing, for anything else."""
    array = loss._data[0]
    if type(array) is not _ndarray or loss._layout is not None or \
            debug_or_function_hooks():
        return False
    root = loss._node._creator_node
    if root is None or not _lean_graph(root):
        return False
    cdef bint start_with_one = array.size == 1 and \
        loss._grad_var is None and loss._grad is None
    if start_with_one and (array.ndim != 0 or array.dtype.kind != 'f'):
        return False  # Chainer's own backward warns, or its check raises
    if start_with_one:  # what ``loss.grad = 1`` and taking it leave
        ones = numpy.ones_like(array)
        if loss_scale is not None:
            ones *= loss_scale
        grad_var = new_variable(ones, True)
        loss._grad_valid = True
    else:
        grad_var = loss.grad_var
    loss._grad_var = loss._grad = None
    old = _set_local_config('enable_backprop', False)
    try:
        _backprop_to_all(loss._node, grad_var, loss_scale)
    finally:
        _restore_local_config('enable_backprop', old)
    return True


cdef object _set_local_config(str name, object value):
    """``chainer.config.<name> = value`` for this thread, as
    ``using_config`` sets it; returns the entry's previous local value,
    or :data:`ABSENT`."""
    cdef dict local = _local.__dict__
    old = local.get(name, _ABSENT)
    local[name] = value
    return old


cdef void _restore_local_config(str name, object old) except *:
    cdef dict local = _local.__dict__
    if old is _ABSENT:
        local.pop(name, None)
    else:
        local[name] = old


cdef bint _lean_graph(object root) except -1:
    """Does the graph behind the function node ``root`` hold a chainerjit
    node, and no node with function hooks of its own or its own
    ``backward_accumulate``?"""
    cdef list stack = [root]
    cdef set seen = {root}
    cdef bint jitted = False
    classes = _nodes()
    while stack:
        func = stack.pop()
        if func.inputs is None or func._n_local_function_hooks != 0 or \
                type(func).backward_accumulate is not \
                _plain_backward_accumulate:
            return False
        if type(func) in classes:
            jitted = True
        for x in func.inputs:
            creator = x._creator_node
            if creator is not None and creator not in seen:
                seen.add(creator)
                stack.append(creator)
    return jitted


cdef void _backprop_to_all(object y, object gy, object loss_scale) except *:
    """Chainer's ``_backprop_to_all([(y, gy)], False, loss_scale)``: the
    same nodes' ``backward`` in the same order (by rank, then first
    seen), the gradients summed in the same order, the same leaves'
    ``grad_var`` set. A chainerjit node's gradients are not checked
    against its inputs' shapes and dtypes: they are right by
    construction."""
    cdef list candidates = []
    cdef dict seen = {}
    cdef dict grads = {}
    cdef set leaves = set()
    cdef dict in_grad
    cdef tuple targets
    cdef bint jitted
    classes = _nodes()
    _grad_list(grads, y).append(gy)
    _add_candidate(candidates, seen, y._creator_node)
    while candidates:
        func = _heappop(candidates)[2]
        inputs = func.inputs
        targets = tuple([i for i in range(len(inputs))
                         if inputs[i]._requires_grad])
        out_grad = tuple([
            _pop_grad(grads, node)
            if node is not None and node._creator_node is not None else None
            for node in [ref() for ref in func.outputs]])
        if not targets:
            continue
        in_grad = {}
        for i in targets:
            x = inputs[i]
            if x not in in_grad:
                in_grad[x] = _grad_list(grads, x)
        jitted = type(func) in classes
        if jitted or _on_host(inputs, out_grad):
            _backprop_step(func, targets, out_grad, in_grad)
        else:
            with chainer.using_device(chainer.backend.get_device_from_array(
                    *([x._data for x in inputs] +
                      [None if g is None else g._data[0]
                       for g in out_grad]))):
                _backprop_step(func, targets, out_grad, in_grad)
        del out_grad
        for x, gx in in_grad.items():
            if not gx:
                continue
            if not jitted and not func.__dict__.get(
                    '_chainerjit_grad_checked'):
                for g in gx:
                    if g is not None:
                        _check_grad_type(func, x, True, g._data[0])
            if x._creator_node is None:
                leaves.add(x)
            else:
                _add_candidate(candidates, seen, x._creator_node)
    for x in leaves:
        variable = x._variable()
        gx = _pop_grad(grads, x)
        if variable is not None:
            _set_grad_var(variable, gx)
            variable._loss_scale = loss_scale


cdef object _chainer_set_grad_var = _Variable._set_grad_var_without_check


cdef inline void _set_grad_var(object variable, object gx) except *:
    """``variable._set_grad_var_without_check(gx)``: its two assignments
    made here for NumPy arrays, without the method's Python frame."""
    if type(variable)._set_grad_var_without_check is not \
            _chainer_set_grad_var or variable._has_chainerx_array or (
                gx is not None and gx._has_chainerx_array):
        variable._set_grad_var_without_check(gx)
        return
    variable._grad_var = gx
    variable._grad = None if gx is None else gx._data[0]


cdef inline void _add_candidate(list candidates, dict seen,
                                object func) except *:
    if func not in seen:
        _heappush(candidates, (-func.rank, len(seen), func))
        seen[func] = None


cdef list _grad_list(dict grads, object node):
    """``GradTable.get_as_list`` (``accumulate_grad_inputs=True``): a
    leaf's list starts with the gradient its Variable holds."""
    found = grads.get(node)
    if found is None:
        if node._creator_node is None:
            if node._old_style_grad_generator is not None:
                node._check_old_style_gradient()  # raises
            gv = _take_grad_var(node)
            found = [] if gv is None else [gv]
        else:
            found = []
        grads[node] = found
    return found


cdef object _pop_grad(dict grads, object node):
    """``GradTable.pop`` (``accumulate_grad_inputs=True``)."""
    found = grads.pop(node, None)
    if found is not None:
        return found[0] if len(found) == 1 else \
            _backprop_utils._reduce(found)
    return _take_grad_var(node)


cdef object _take_grad_var(object node):
    """``_backprop_utils._grad_var_from_alive_node``: the gradient of the
    node's Variable (made a Variable if only its array is there), which
    is then cleared."""
    var = node._variable()
    if var is None:
        return None
    if var._has_chainerx_array:
        return _backprop_utils._grad_var_from_alive_node(node)
    gv = var._grad_var
    if gv is None and var._grad is not None:
        gv = _Variable(var._grad, layout=var._layout)
    var._grad_var = var._grad = None
    return gv


cdef bint _on_host(tuple inputs, tuple out_grad):
    """Are the inputs' retained arrays and the output gradients NumPy
    arrays (or absent), so that the device context Chainer enters around
    a backward is the CPU's, which does nothing?"""
    for x in inputs:
        if x._data is not None and type(x._data) is not _ndarray:
            return False
    for g in out_grad:
        if g is not None and type(g._data[0]) is not _ndarray:
            return False
    return True


cdef void _backprop_step(object func, tuple targets, tuple out_grad,
                         dict in_grad) except *:
    """``_backprop_utils.backprop_step`` outside debug mode, for a node
    with Chainer's own ``backward_accumulate``."""
    gxs = func.backward(targets, out_grad)
    cdef Py_ssize_t n = len(gxs), n_inputs = len(func.inputs)
    if n == n_inputs:
        gxs = tuple([gxs[i] for i in targets])
    elif n != len(targets):
        msg = 'number of gradients returned from backward is incorrect: '
        if n_inputs == len(targets):
            msg += '%s != expected %s' % (n, n_inputs)
        else:
            msg += '%s != expected %s or %s' % (n, n_inputs, len(targets))
        raise ValueError(func._get_error_message(msg))
    inputs = func.inputs
    for i, gx in zip(targets, gxs):
        if gx is None or gx._data[0] is None:
            continue
        in_grad[inputs[i]].append(gx)
    if not func.lazy_grad_sum:
        for gx in in_grad.values():
            if len(gx) >= 2:
                _backprop_utils._reduce(gx)


# --- the optimizer update (``optimizers``) ---------------------------------

cdef object _UpdateRule = None  # chainer.optimizer.UpdateRule, and the
cdef object _SGDRule = None  # rules with a loop of their own, on first use
cdef object _MomentumSGDRule = None
cdef object _elementwise = None
cdef object _float16 = numpy.float16


cdef void _load_rules():
    global _UpdateRule, _SGDRule, _MomentumSGDRule, _elementwise, \
        _Hyperparameter
    from chainer import optimizer
    from chainer.optimizers import momentum_sgd, sgd
    from chainerjit.ops import _loops_elementwise as loops
    _UpdateRule = optimizer.UpdateRule
    _Hyperparameter = optimizer.Hyperparameter
    _SGDRule = sgd.SGDRule
    _MomentumSGDRule = momentum_sgd.MomentumSGDRule
    _elementwise = loops


cdef inline bint _plain_grad(object param):
    """Is ``param.grad`` Chainer 7's plain read for a NumPy parameter
    (standard layout, valid, no ChainerX), so that :func:`_grad` may read
    it directly?"""
    return param._layout is None and param._grad_valid and \
        not param._has_chainerx_array


cdef inline object _grad(object param):
    grad_var = param._grad_var
    return param._grad if grad_var is None else grad_var._data[0]


cpdef bint any_grad_cleared(list params):
    """Is some ``param.grad`` None (``reallocate_cleared_grads`` would
    allocate)?"""
    for param in params:
        if (_grad(param) if _plain_grad(param) else param.grad) is None:
            return True
    return False


cpdef bint plain_rule(object rule, object param):
    """Would ``rule.update(param)`` only call ``update_core_cpu`` (after
    initialising the states on the first call): the base class's
    ``update`` and ``update_core``, a NumPy parameter in the standard
    layout, no loss scaling, no fp32 update of a float16 parameter, no
    update hooks?"""
    if _UpdateRule is None:
        _load_rules()
    cls = type(rule)
    hooks = rule._hookable
    array = param._data[0]
    return (cls.update is _UpdateRule.update and
            cls.update_core is _UpdateRule.update_core and
            type(array) is _ndarray and _plain_grad(param) and
            param._loss_scale is None and
            not (rule._use_fp32_update and array.dtype == _float16) and
            not hooks._pre_update_hooks and not hooks._post_update_hooks)


cpdef bint update_in_one_pass(object rule, object param):
    """SGD's and momentum SGD's ``update_core_cpu`` as one loop over the
    arrays (``_loops_elementwise``: the same roundings, no temporaries).
    False where the rule's own code must run (other rules, subclasses,
    arrays the loop does not take)."""
    if _UpdateRule is None:
        _load_rules()
    cls = type(rule)
    if cls is _SGDRule:
        grad = _grad(param)
        return grad is None or _elementwise.sgd_update(
            param._data[0], grad, _hyperparameter(rule.hyperparam, 'lr'))
    if cls is _MomentumSGDRule:
        grad = _grad(param)
        hyperparam = rule.hyperparam
        return grad is None or _elementwise.momentum_sgd_update(
            param._data[0], grad, rule.state['v'],
            _hyperparameter(hyperparam, 'lr'),
            _hyperparameter(hyperparam, 'momentum'))
    return False


cdef object _Hyperparameter = None  # chainer.optimizer.Hyperparameter


cdef object _hyperparameter(object hyperparam, str name):
    """``getattr(hyperparam, name)``: Chainer's ``Hyperparameter`` looks a
    name up its parents' chain in Python (``__getattr__``, 0.45 us);
    here the chain's dictionaries are read in C, and Chainer's own lookup
    runs for anything but plain ``Hyperparameter`` objects."""
    cdef dict attributes
    found = hyperparam
    while type(found) is _Hyperparameter:
        attributes = found.__dict__
        value = attributes.get(name, _ABSENT)
        if value is not _ABSENT:
            return value
        found = attributes.get('_parent')
    return getattr(hyperparam, name)


cpdef void update_params(list params) except *:
    """``param.update()`` for each parameter, with the rule's
    ``update_core_cpu`` (or the same arithmetic in one loop) called
    straight away where Chainer's steps around it would do nothing."""
    if _UpdateRule is None:
        _load_rules()
    for param in params:
        rule = param.update_rule
        if rule is None:
            continue
        if not plain_rule(rule, param):
            param.update()
            continue
        if not rule.enabled:
            continue
        rule.t += 1
        if rule.state is None:
            rule._init_states(param)
        if not update_in_one_pass(rule, param):
            rule.update_core_cpu(param)
