// RUN: cpc-opt %s -split-input-file -verify-diagnostics

//===----------------------------------------------------------------------===//
// ShardingAttr::verify
//===----------------------------------------------------------------------===//

// Tests that a sharding dim entry must be a list of axes, not a bare value.
cpc.mesh @mesh shape = [2, 4] axes = ["dp", "tp"]
func.func @sharding_dim_not_list(%a: tensor<8x8xf32>) {
  // expected-error @+1 {{each tensor dim needs a list of mesh axes (use [] to replicate)}}
  %0 = cpc.shard %a to <@mesh, [["dp"], 3]> : tensor<8x8xf32>
  return
}

// -----

// Tests that dim axes must be non-empty strings.
cpc.mesh @mesh shape = [2, 4] axes = ["dp", "tp"]
func.func @sharding_empty_axis_name(%a: tensor<8x8xf32>) {
  // expected-error @+1 {{dim axes must be lists of non-empty mesh axis names}}
  %0 = cpc.shard %a to <@mesh, [[""], []]> : tensor<8x8xf32>
  return
}

// -----

// Tests that dim axes must be strings, not integers.
cpc.mesh @mesh shape = [2, 4] axes = ["dp", "tp"]
func.func @sharding_axis_not_string(%a: tensor<8x8xf32>) {
  // expected-error @+1 {{dim axes must be lists of non-empty mesh axis names}}
  %0 = cpc.shard %a to <@mesh, [[1], []]> : tensor<8x8xf32>
  return
}

// -----

// Tests that partial axes must be non-empty strings.
cpc.mesh @mesh shape = [2, 4] axes = ["dp", "tp"]
func.func @sharding_bad_partial(%a: tensor<8x8xf32>) {
  // expected-error @+1 {{partial axes must be lists of non-empty mesh axis names}}
  %0 = cpc.shard %a to <@mesh, [[], []], partial = [""]> : tensor<8x8xf32>
  return
}

// -----

// Tests that one mesh axis cannot split two tensor dims.
cpc.mesh @mesh shape = [2, 4] axes = ["dp", "tp"]
func.func @sharding_axis_twice(%a: tensor<8x8xf32>) {
  // expected-error @+1 {{mesh axis 'dp' is used more than once}}
  %0 = cpc.shard %a to <@mesh, [["dp"], ["dp"]]> : tensor<8x8xf32>
  return
}

// -----

// Tests that an axis cannot both split a dim and hold partial sums.
cpc.mesh @mesh shape = [2, 4] axes = ["dp", "tp"]
func.func @sharding_axis_split_and_partial(%a: tensor<8x8xf32>) {
  // expected-error @+1 {{mesh axis 'tp' is used more than once}}
  %0 = cpc.shard %a to <@mesh, [[], ["tp"]], partial = ["tp"]> : tensor<8x8xf32>
  return
}

// -----

// Tests that a reduction kind other than sum needs partial axes.
cpc.mesh @mesh shape = [2, 4] axes = ["dp", "tp"]
func.func @sharding_reduction_without_partial(%a: tensor<8x8xf32>) {
  // expected-error @+1 {{a reduction (max) needs partial axes}}
  %0 = cpc.shard %a to <@mesh, [[], ["tp"]], reduction = max> : tensor<8x8xf32>
  return
}

// -----

// Tests that a priority is not negative.
cpc.mesh @mesh shape = [2, 4] axes = ["dp", "tp"]
func.func @sharding_negative_priority(%a: tensor<8x8xf32>) {
  // expected-error @+1 {{priority must be >= 0, got -1}}
  %0 = cpc.shard %a to <@mesh, [[], ["tp"]], priority = -1> : tensor<8x8xf32>
  return
}

// -----

// Tests that the optional parts of a sharding come once each, in order.
cpc.mesh @mesh shape = [2, 4] axes = ["dp", "tp"]
func.func @sharding_tail_out_of_order(%a: tensor<8x8xf32>) {
  // expected-error @+1 {{expected 'partial', 'reduction' or 'priority' (once each, in this order), got 'partial'}}
  %0 = cpc.shard %a to <@mesh, [[], []], priority = 1, partial = ["tp"]> : tensor<8x8xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// MeshOp
//===----------------------------------------------------------------------===//

// Tests that a mesh needs one axis name per dim.
// expected-error @+1 {{'cpc.mesh' op needs one axis name per mesh dim}}
cpc.mesh @mesh shape = [2, 4] axes = ["dp"]

// -----

// Tests that a mesh needs at least one axis.
// expected-error @+1 {{'cpc.mesh' op needs at least one axis}}
cpc.mesh @mesh shape = [] axes = []

// -----

// Tests that mesh axes must have size >= 1.
// expected-error @+1 {{'cpc.mesh' op axis 'tp' must have size >= 1}}
cpc.mesh @mesh shape = [2, 0] axes = ["dp", "tp"]

// -----

// Tests that mesh axis names must be unique.
// expected-error @+1 {{'cpc.mesh' op axis names must be non-empty and unique}}
cpc.mesh @mesh shape = [2, 2] axes = ["dp", "dp"]

// -----

// Tests that mesh axis names must be non-empty.
// expected-error @+1 {{'cpc.mesh' op axis names must be non-empty and unique}}
cpc.mesh @mesh shape = [2, 2] axes = ["dp", ""]

// -----

//===----------------------------------------------------------------------===//
// ShardOp::verifySymbolUses
//===----------------------------------------------------------------------===//

// Tests that a sharding must refer to an existing mesh.
cpc.mesh @mesh shape = [2, 4] axes = ["dp", "tp"]
func.func @shard_unknown_mesh(%a: tensor<8x8xf32>) {
  // expected-error @+1 {{'cpc.shard' op refers to unknown mesh @nope}}
  %0 = cpc.shard %a to <@nope, [["dp"], []]> : tensor<8x8xf32>
  return
}

// -----

// Tests that a symbol that is not a mesh is not accepted as one.
func.func private @mesh()
func.func @shard_symbol_not_mesh(%a: tensor<8x8xf32>) {
  // expected-error @+1 {{'cpc.shard' op refers to unknown mesh @mesh}}
  %0 = cpc.shard %a to <@mesh, [[], []]> : tensor<8x8xf32>
  return
}

// -----

// Tests that a sharding needs one entry per tensor dim.
cpc.mesh @mesh shape = [2, 4] axes = ["dp", "tp"]
func.func @shard_rank_mismatch(%a: tensor<8x8x8xf32>) {
  // expected-error @+1 {{'cpc.shard' op sharding has 2 dims but the tensor has rank 3}}
  %0 = cpc.shard %a to <@mesh, [["dp"], []]> : tensor<8x8x8xf32>
  return
}

// -----

// Tests that dim axes must exist on the mesh.
cpc.mesh @mesh shape = [2, 4] axes = ["dp", "tp"]
func.func @shard_unknown_dim_axis(%a: tensor<8x8xf32>) {
  // expected-error @+1 {{'cpc.shard' op mesh 'mesh' has no axis 'pp'}}
  %0 = cpc.shard %a to <@mesh, [["pp"], []]> : tensor<8x8xf32>
  return
}

// -----

// Tests that partial axes must exist on the mesh.
cpc.mesh @mesh shape = [2, 4] axes = ["dp", "tp"]
func.func @shard_unknown_partial_axis(%a: tensor<8x8xf32>) {
  // expected-error @+1 {{'cpc.shard' op mesh 'mesh' has no axis 'pp'}}
  %0 = cpc.shard %a to <@mesh, [["dp"], []], partial = ["pp"]> : tensor<8x8xf32>
  return
}

// -----

// Tests that a split dim must divide evenly by the product of its mesh axes.
cpc.mesh @mesh shape = [2, 4] axes = ["dp", "tp"]
func.func @shard_not_divisible(%a: tensor<12x8xf32>) {
  // expected-error @+1 {{'cpc.shard' op dim 0 of size 12 is not divisible into 8 shards}}
  %0 = cpc.shard %a to <@mesh, [["dp", "tp"], []]> : tensor<12x8xf32>
  return
}

// -----

// Tests that shard keeps its operand type (generic form with a different result type).
cpc.mesh @mesh shape = [2, 4] axes = ["dp", "tp"]
func.func @shard_type_change(%a: tensor<8x8xf32>) {
  // expected-error @+1 {{'cpc.shard' op requires the same type for all operands and results}}
  %0 = "cpc.shard"(%a) <{sharding = #cpc.sharding<@mesh, [[], []]>}> : (tensor<8x8xf32>) -> tensor<8x8xf16>
  return
}

// -----

//===----------------------------------------------------------------------===//
// Values with no operands.
//===----------------------------------------------------------------------===//

// Tests that a variable needs a name.
// expected-error @+1 {{'cpc.variable' op needs a non-empty name}}
cpc.variable @"" : tensor<4xf32>

// -----

// Tests that integer parameters cannot be trainable.
// expected-error @+1 {{'cpc.variable' op only floating-point parameters can be trainable}}
cpc.variable @step trainable : tensor<i64>

// -----

// Tests that a state (a variable with a role) is never trainable: training updates parameters.
// expected-error @+1 {{'cpc.variable' op only floating-point parameters can be trainable}}
cpc.variable @m state <exp_avg> trainable : tensor<4xf32>

// -----

// Tests that a parameter starts at the model's value, not at an init.
// expected-error @+1 {{'cpc.variable' op a parameter starts at the model's value: only a state (with a role) has init}}
cpc.variable @w {init = 1.0 : f64} : tensor<4xf32>

// -----

// Tests that a loss-scaler state is not kept in another element order (a parameter's moments
// and accumulator may be: they follow the parameter's).
// expected-error @+1 {{'cpc.variable' op only a parameter and the states kept beside it are stored in another element order}}
cpc.variable @s state <loss_scale> {stored_perm = array<i64: 1, 0>, stored_view = array<i64: 2, 2>} : tensor<4xf32>

// -----

cpc.mesh @mesh shape = [2] axes = ["dp"]
// Tests that a sharded variable names both its global shape and its sharding.
// expected-error @+1 {{'cpc.variable' op a sharded variable needs both global_shape and sharding}}
cpc.variable @w trainable {sharding = #cpc.sharding<@mesh, [["dp"]]>} : tensor<6xf32>

// -----

cpc.mesh @mesh shape = [2] axes = ["dp"]
// Tests that a sharded variable's block times the ranks is its global size.
// expected-error @+1 {{'cpc.variable' op block of 4 elements along dim 0 times 2 ranks is not the global 12 elements}}
cpc.variable @w trainable {global_shape = array<i64: 4, 3>, sharding = #cpc.sharding<@mesh, [["dp"]]>} : tensor<4xf32>

// -----

cpc.mesh @mesh shape = [2, 2] axes = ["dp", "tp"]
// Tests that a block split dim by dim (tensor parallelism) matches its global shape per dim.
// expected-error @+1 {{'cpc.variable' op block of 3 elements along dim 1 times 2 ranks is not the global 3 elements}}
cpc.variable @w trainable {global_shape = array<i64: 4, 3>, sharding = #cpc.sharding<@mesh, [["tp"], ["dp"]]>} : tensor<2x3xf32>

// -----

cpc.mesh @mesh shape = [2, 2] axes = ["dp", "tp"]
// Tests that a sharded state is never partial.
// expected-error @+1 {{'cpc.variable' op a sharded variable is a 1-D block of the flattened value or a block split dim by dim}}
cpc.variable @m state <exp_avg> {global_shape = array<i64: 4, 3>, sharding = #cpc.sharding<@mesh, [["tp"], []], partial = ["dp"]>} : tensor<2x3xf32>

// -----

// Tests that a read names a declared variable.
func.func @read_undeclared() {
  // expected-error @+1 {{'cpc.parameter' op refers to @w, which is no cpc.variable}}
  %0 = cpc.parameter @w : tensor<4xf32>
  return
}

// -----

// Tests that a state is not read as a parameter.
cpc.variable @m state <exp_avg> : tensor<4xf32>
func.func @read_state_as_parameter() {
  // expected-error @+1 {{'cpc.parameter' op reads @m, which is a state: read it with cpc.state}}
  %0 = cpc.parameter @m : tensor<4xf32>
  return
}

// -----

// Tests that a read has its variable's type: a variable is stored once, one way.
cpc.variable @w trainable : tensor<4x3xf32>
func.func @read_other_type() {
  // expected-error @+1 {{'cpc.parameter' op uses @w as 'tensor<2x3xf32>', but the variable is 'tensor<4x3xf32>'}}
  %0 = cpc.parameter @w : tensor<2x3xf32>
  return
}

// -----

// Tests that an assign writes a value of its variable's type.
cpc.variable @m state <exp_avg> : tensor<4xf32>
func.func @assign_other_type(%v: tensor<2xf32>) {
  // expected-error @+1 {{'cpc.assign' op uses @m as 'tensor<2xf32>', but the variable is 'tensor<4xf32>'}}
  cpc.assign %v to @m : tensor<2xf32>
  return
}

// -----

// Tests that a variable is declared in the module, not in a function.
func.func @variable_in_function() {
  // expected-error @+1 {{'cpc.variable' op expects parent op 'builtin.module'}}
  cpc.variable @w : tensor<4xf32>
  return
}

// -----

// Tests that random_uniform rejects low == high.
func.func @random_uniform_empty_range() {
  // expected-error @+1 {{'cpc.random_uniform' op needs low < high}}
  %0 = cpc.random_uniform {low = 1.0 : f64, high = 1.0 : f64, seed = 0 : i64} : tensor<4xf32>
  return
}

// -----

// Tests that random_uniform rejects low > high.
func.func @random_uniform_reversed_range() {
  // expected-error @+1 {{'cpc.random_uniform' op needs low < high}}
  %0 = cpc.random_uniform {low = 1.0 : f64, high = 0.0 : f64, seed = 0 : i64} : tensor<4xf32>
  return
}

// -----

// Tests that random_uniform produces floats only.
func.func @random_uniform_int() {
  // expected-error @+1 {{'cpc.random_uniform' op result #0 must be statically shaped tensor of floating-point values, but got 'tensor<4xi32>'}}
  %0 = cpc.random_uniform {low = 0.0 : f64, high = 1.0 : f64, seed = 0 : i64} : tensor<4xi32>
  return
}

// -----

// Tests that a constant's value type must equal its result type (generic form).
func.func @constant_type_mismatch() {
  // expected-error @+1 {{'cpc.constant' op failed to verify that all of {value, result} have same type}}
  %0 = "cpc.constant"() <{value = dense<0.5> : tensor<f32>}> : () -> tensor<2xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// Elementwise and type constraints.
//===----------------------------------------------------------------------===//

// Tests that gelu rejects an unknown approximation.
func.func @gelu_bad_approximate(%x: tensor<4xf32>) {
  // expected-error @+2 {{expected ::cpc::GeluApproximation to be one of: none, tanh}}
  // expected-error @+1 {{failed to parse Cpc_GeluApproximationAttr parameter 'value'}}
  %0 = cpc.gelu %x {approximate = #cpc.gelu_approximation<sigmoid>} : tensor<4xf32>
  return
}

// -----

// Tests that a closed set of choices is an enum, not a string that happens to spell a case.
func.func @gelu_approximate_as_string(%x: tensor<4xf32>) {
  // expected-error @+1 {{attribute 'approximate' failed to satisfy constraint: GELU exact}}
  %0 = cpc.gelu %x {approximate = "tanh"} : tensor<4xf32>
  return
}

// -----

// Tests that dynamically shaped tensors are rejected.
func.func @dynamic_shape(%x: tensor<?x3xf32>) {
  // expected-error @+1 {{'cpc.neg' op operand #0 must be statically shaped tensor of any type values, but got 'tensor<?x3xf32>'}}
  %0 = cpc.neg %x : tensor<?x3xf32>
  return
}

// -----

// Tests that binary ops also reject dynamically shaped operands (before shape inference).
func.func @dynamic_shape_binary(%a: tensor<?x3xf32>, %b: tensor<3xf32>) {
  // expected-error @+1 {{'cpc.add' op operand #0 must be statically shaped tensor of any type values, but got 'tensor<?x3xf32>'}}
  %0 = cpc.add %a, %b : (tensor<?x3xf32>, tensor<3xf32>) -> tensor<?x3xf32>
  return
}

// -----

// Tests that float-only unary ops reject integers.
func.func @exp_int(%x: tensor<3xi32>) {
  // expected-error @+1 {{'cpc.exp' op operand #0 must be statically shaped tensor of floating-point values, but got 'tensor<3xi32>'}}
  %0 = cpc.exp %x : tensor<3xi32>
  return
}

// -----

// Tests that pow rejects integers.
func.func @pow_int(%a: tensor<3xi32>) {
  // expected-error @+1 {{'cpc.pow' op operand #0 must be statically shaped tensor of floating-point values, but got 'tensor<3xi32>'}}
  %0 = cpc.pow %a, %a : (tensor<3xi32>, tensor<3xi32>) -> tensor<3xi32>
  return
}

// -----

// Tests that matmul rejects integers.
func.func @matmul_int(%a: tensor<3x3xi32>) {
  // expected-error @+1 {{'cpc.matmul' op operand #0 must be statically shaped tensor of floating-point values, but got 'tensor<3x3xi32>'}}
  %0 = cpc.matmul %a, %a : (tensor<3x3xi32>, tensor<3x3xi32>) -> tensor<3x3xi32>
  return
}

// -----

// Tests that logic ops need i1 operands.
func.func @and_float(%a: tensor<3xf32>) {
  // expected-error @+1 {{'cpc.and' op operand #0 must be statically shaped tensor of 1-bit signless integer values, but got 'tensor<3xf32>'}}
  %0 = cpc.and %a, %a : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xi1>
  return
}

// -----

// Tests that not needs i1 operands.
func.func @not_int(%a: tensor<3xi32>) {
  // expected-error @+1 {{'cpc.not' op operand #0 must be statically shaped tensor of 1-bit signless integer values, but got 'tensor<3xi32>'}}
  %0 = cpc.not %a : tensor<3xi32>
  return
}

// -----

// Tests that binary operands of mismatched shapes do not broadcast.
func.func @add_no_broadcast(%a: tensor<2x3xf32>, %b: tensor<4xf32>) {
  // expected-error @+2 {{shapes [2,3] and [4] do not broadcast}}
  // expected-error @+1 {{'cpc.add' op failed to infer returned types}}
  %0 = cpc.add %a, %b : (tensor<2x3xf32>, tensor<4xf32>) -> tensor<2x3xf32>
  return
}

// -----

// Tests that binary operands must share the element type.
func.func @add_element_types(%a: tensor<3xf32>, %b: tensor<3xf16>) {
  // expected-error @+2 {{operand element types differ}}
  // expected-error @+1 {{'cpc.add' op failed to infer returned types}}
  %0 = cpc.add %a, %b : (tensor<3xf32>, tensor<3xf16>) -> tensor<3xf32>
  return
}

// -----

// Tests that a declared result type different from the inferred one is rejected.
func.func @add_wrong_result(%a: tensor<2x3xf32>, %b: tensor<3xf32>) {
  // expected-error @+2 {{'cpc.add' op inferred type(s) 'tensor<2x3xf32>' are incompatible with return type(s) of operation 'tensor<2x4xf32>'}}
  // expected-error @+1 {{'cpc.add' op failed to infer returned types}}
  %0 = cpc.add %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x4xf32>
  return
}

// -----

// Tests that comparisons must be declared with i1 results.
func.func @less_non_bool_result(%a: tensor<3xf32>) {
  // expected-error @+2 {{'cpc.less' op inferred type(s) 'tensor<3xi1>' are incompatible with return type(s) of operation 'tensor<3xf32>'}}
  // expected-error @+1 {{'cpc.less' op failed to infer returned types}}
  %0 = cpc.less %a, %a : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  return
}

// -----

// Tests that where rejects branches of different element types.
func.func @where_branch_types(%c: tensor<3xi1>, %a: tensor<3xf32>, %b: tensor<3xf16>) {
  // expected-error @+2 {{branch element types differ}}
  // expected-error @+1 {{'cpc.where' op failed to infer returned types}}
  %0 = cpc.where %c, %a, %b : (tensor<3xi1>, tensor<3xf32>, tensor<3xf16>) -> tensor<3xf32>
  return
}

// -----

// Tests that where rejects a condition that does not broadcast with the branches.
func.func @where_no_broadcast(%c: tensor<4xi1>, %a: tensor<2x3xf32>, %b: tensor<3xf32>) {
  // expected-error @+2 {{condition and branches do not broadcast}}
  // expected-error @+1 {{'cpc.where' op failed to infer returned types}}
  %0 = cpc.where %c, %a, %b : (tensor<4xi1>, tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  return
}

// -----

// Tests that where needs an i1 condition.
func.func @where_int_condition(%c: tensor<3xi32>, %a: tensor<3xf32>) {
  // expected-error @+1 {{'cpc.where' op operand #0 must be statically shaped tensor of 1-bit signless integer values, but got 'tensor<3xi32>'}}
  %0 = cpc.where %c, %a, %a : (tensor<3xi32>, tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  return
}

// -----

// Tests that cast keeps the shape.
func.func @cast_shape(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{'cpc.cast' op all non-scalar operands/results must have the same shape and base type}}
  %0 = cpc.cast %x : tensor<2x3xf32> -> tensor<6xi64>
  return
}

// -----

//===----------------------------------------------------------------------===//
// Contractions, reductions, normalizations.
//===----------------------------------------------------------------------===//

// Tests that matmul rejects mismatched contracting dims.
func.func @matmul_contracting(%a: tensor<3x4xf32>, %b: tensor<5x6xf32>) {
  // expected-error @+2 {{contracting dims differ: [3,4] x [5,6]}}
  // expected-error @+1 {{'cpc.matmul' op failed to infer returned types}}
  %0 = cpc.matmul %a, %b : (tensor<3x4xf32>, tensor<5x6xf32>) -> tensor<3x6xf32>
  return
}

// -----

// Tests that matmul rejects batch dims that do not broadcast.
func.func @matmul_batch(%a: tensor<2x3x4xf32>, %b: tensor<3x4x5xf32>) {
  // expected-error @+2 {{batch dims do not broadcast: [2,3,4] x [3,4,5]}}
  // expected-error @+1 {{'cpc.matmul' op failed to infer returned types}}
  %0 = cpc.matmul %a, %b : (tensor<2x3x4xf32>, tensor<3x4x5xf32>) -> tensor<2x3x5xf32>
  return
}

// -----

// Tests that matmul rejects rank-0 operands.
func.func @matmul_scalar(%a: tensor<f32>, %b: tensor<4xf32>) {
  // expected-error @+2 {{operands must have rank >= 1}}
  // expected-error @+1 {{'cpc.matmul' op failed to infer returned types}}
  %0 = cpc.matmul %a, %b : (tensor<f32>, tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

// Tests that matmul operands must share the element type.
func.func @matmul_element_types(%a: tensor<3x4xf32>, %b: tensor<4x5xbf16>) {
  // expected-error @+2 {{operand element types differ}}
  // expected-error @+1 {{'cpc.matmul' op failed to infer returned types}}
  %0 = cpc.matmul %a, %b : (tensor<3x4xf32>, tensor<4x5xbf16>) -> tensor<3x5xf32>
  return
}

// -----

// Tests that a vector-vector matmul is rank 0, not rank 1.
func.func @matmul_dot_result(%a: tensor<3xf32>) {
  // expected-error @+2 {{'cpc.matmul' op inferred type(s) 'tensor<f32>' are incompatible with return type(s) of operation 'tensor<1xf32>'}}
  // expected-error @+1 {{'cpc.matmul' op failed to infer returned types}}
  %0 = cpc.matmul %a, %a : (tensor<3xf32>, tensor<3xf32>) -> tensor<1xf32>
  return
}

// -----

// Tests that reduction axes must be sorted.
func.func @reduce_unsorted(%x: tensor<2x3x4xf32>) {
  // expected-error @+2 {{reduction axes must be sorted and unique}}
  // expected-error @+1 {{'cpc.reduce_sum' op failed to infer returned types}}
  %0 = cpc.reduce_sum %x {axes = array<i64: 2, 1>} : tensor<2x3x4xf32> -> tensor<2xf32>
  return
}

// -----

// Tests that reduction axes must be unique.
func.func @reduce_duplicate(%x: tensor<2x3x4xf32>) {
  // expected-error @+2 {{reduction axes must be sorted and unique}}
  // expected-error @+1 {{'cpc.reduce_max' op failed to infer returned types}}
  %0 = cpc.reduce_max %x {axes = array<i64: 1, 1>} : tensor<2x3x4xf32> -> tensor<2x4xf32>
  return
}

// -----

// Tests that reduction axes must be below the rank.
func.func @reduce_out_of_range(%x: tensor<2x3x4xf32>) {
  // expected-error @+2 {{reduction axis 3 out of range for rank 3}}
  // expected-error @+1 {{'cpc.reduce_mean' op failed to infer returned types}}
  %0 = cpc.reduce_mean %x {axes = array<i64: 3>, keepdims = true} : tensor<2x3x4xf32> -> tensor<2x3x4x1xf32>
  return
}

// -----

// Tests that negative reduction axes are rejected (the importer normalizes them).
func.func @reduce_negative(%x: tensor<2x3x4xf32>) {
  // expected-error @+2 {{reduction axis -1 out of range for rank 3}}
  // expected-error @+1 {{'cpc.reduce_prod' op failed to infer returned types}}
  %0 = cpc.reduce_prod %x {axes = array<i64: -1>} : tensor<2x3x4xf32> -> tensor<2x3xf32>
  return
}

// -----

// Tests that keepdims = true keeps the reduced dims as 1 in the declared result type.
func.func @reduce_keepdims_result(%x: tensor<2x3x4xf32>) {
  // expected-error @+2 {{'cpc.reduce_min' op inferred type(s) 'tensor<2x3x1xf32>' are incompatible with return type(s) of operation 'tensor<2x3xf32>'}}
  // expected-error @+1 {{'cpc.reduce_min' op failed to infer returned types}}
  %0 = cpc.reduce_min %x {axes = array<i64: 2>, keepdims = true} : tensor<2x3x4xf32> -> tensor<2x3xf32>
  return
}

// -----

// Tests that reduce_mean rejects integers.
func.func @reduce_mean_int(%x: tensor<2x3xi32>) {
  // expected-error @+1 {{'cpc.reduce_mean' op operand #0 must be statically shaped tensor of floating-point values, but got 'tensor<2x3xi32>'}}
  %0 = cpc.reduce_mean %x {axes = array<i64: 1>} : tensor<2x3xi32> -> tensor<2xi32>
  return
}

// -----

// Tests that layer_norm scale must have the normalized shape.
func.func @layer_norm_scale_shape(%x: tensor<8x16x32xf32>, %g: tensor<16xf32>, %b: tensor<32xf32>) {
  // expected-error @+2 {{scale and bias must have the normalized shape [32]}}
  // expected-error @+1 {{'cpc.layer_norm' op failed to infer returned types}}
  %0 = cpc.layer_norm %x, %g, %b {axis = 2 : i64, epsilon = 1.0e-05 : f64} : (tensor<8x16x32xf32>, tensor<16xf32>, tensor<32xf32>) -> tensor<8x16x32xf32>
  return
}

// -----

// Tests that layer_norm bias must have the normalized shape of all trailing dims.
func.func @layer_norm_bias_shape(%x: tensor<8x16x32xf32>, %g: tensor<16x32xf32>, %b: tensor<32xf32>) {
  // expected-error @+2 {{scale and bias must have the normalized shape [16,32]}}
  // expected-error @+1 {{'cpc.layer_norm' op failed to infer returned types}}
  %0 = cpc.layer_norm %x, %g, %b {axis = 1 : i64, epsilon = 1.0e-05 : f64} : (tensor<8x16x32xf32>, tensor<16x32xf32>, tensor<32xf32>) -> tensor<8x16x32xf32>
  return
}

// -----

// Tests that layer_norm scale and bias must have the input's element type.
func.func @layer_norm_element_type(%x: tensor<8x32xf32>, %g: tensor<32xbf16>) {
  // expected-error @+2 {{scale and bias must have the input's element type}}
  // expected-error @+1 {{'cpc.layer_norm' op failed to infer returned types}}
  %0 = cpc.layer_norm %x, %g, %g {axis = 1 : i64, epsilon = 1.0e-05 : f64} : (tensor<8x32xf32>, tensor<32xbf16>, tensor<32xbf16>) -> tensor<8x32xf32>
  return
}

// -----

// Tests that layer_norm axis must be within the rank.
func.func @layer_norm_axis(%x: tensor<8x32xf32>, %g: tensor<32xf32>) {
  // expected-error @+2 {{axis 2 out of range for rank 2}}
  // expected-error @+1 {{'cpc.layer_norm' op failed to infer returned types}}
  %0 = cpc.layer_norm %x, %g, %g {axis = 2 : i64, epsilon = 1.0e-05 : f64} : (tensor<8x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  return
}

// -----

// Tests that layer_norm epsilon must be non-negative.
func.func @layer_norm_negative_epsilon(%x: tensor<8x32xf32>, %g: tensor<32xf32>) {
  // expected-error @+2 {{epsilon must be >= 0}}
  // expected-error @+1 {{'cpc.layer_norm' op failed to infer returned types}}
  %0 = cpc.layer_norm %x, %g, %g {axis = 1 : i64, epsilon = -1.0e-05 : f64} : (tensor<8x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  return
}

// -----

// Tests that softmax axis must be within the rank.
func.func @softmax_axis(%x: tensor<2x4x16x16xf32>) {
  // expected-error @+1 {{axis 4 out of range for rank 4}}
  %0 = cpc.softmax %x {axis = 4 : i64} : tensor<2x4x16x16xf32>
  return
}

// -----

// Tests that softmax rejects negative axes.
func.func @softmax_negative_axis(%x: tensor<2x4xf32>) {
  // expected-error @+1 {{axis -1 out of range for rank 2}}
  %0 = cpc.softmax %x {axis = -1 : i64} : tensor<2x4xf32>
  return
}

// -----

// Tests that conv2d needs rank-4 input and weight.
func.func @conv2d_rank(%x: tensor<3x224x224xf32>, %w: tensor<768x3x16x16xf32>) {
  // expected-error @+2 {{input (NCHW) and weight (OIHW) must have rank 4}}
  // expected-error @+1 {{'cpc.conv2d' op failed to infer returned types}}
  %0 = cpc.conv2d %x, %w {strides = array<i64: 16, 16>, padding = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<3x224x224xf32>, tensor<768x3x16x16xf32>) -> tensor<768x14x14xf32>
  return
}

// -----

// Tests that conv2d needs 2 strides, 4 paddings and 2 dilations.
func.func @conv2d_attr_sizes(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) {
  // expected-error @+2 {{needs 2 strides, 4 paddings and 2 dilations}}
  // expected-error @+1 {{'cpc.conv2d' op failed to infer returned types}}
  %0 = cpc.conv2d %x, %w {strides = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilations = array<i64: 1, 1>} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x8x8xf32>
  return
}

// -----

// Tests that conv2d weight input channels times groups must equal the input channels.
func.func @conv2d_groups(%x: tensor<1x8x10x10xf32>, %w: tensor<8x4x3x3xf32>) {
  // expected-error @+2 {{channels 8 and weight [8,4,3,3] do not match groups 4}}
  // expected-error @+1 {{'cpc.conv2d' op failed to infer returned types}}
  %0 = cpc.conv2d %x, %w {strides = array<i64: 1, 1>, padding = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 4 : i64} : (tensor<1x8x10x10xf32>, tensor<8x4x3x3xf32>) -> tensor<1x8x8x8xf32>
  return
}

// -----

// Tests that conv2d output channels must divide by groups.
func.func @conv2d_groups_out_channels(%x: tensor<1x8x10x10xf32>, %w: tensor<6x2x3x3xf32>) {
  // expected-error @+2 {{channels 8 and weight [6,2,3,3] do not match groups 4}}
  // expected-error @+1 {{'cpc.conv2d' op failed to infer returned types}}
  %0 = cpc.conv2d %x, %w {strides = array<i64: 1, 1>, padding = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 4 : i64} : (tensor<1x8x10x10xf32>, tensor<6x2x3x3xf32>) -> tensor<1x6x8x8xf32>
  return
}

// -----

// Tests that conv2d rejects groups < 1.
func.func @conv2d_groups_zero(%x: tensor<1x8x10x10xf32>, %w: tensor<8x8x3x3xf32>) {
  // expected-error @+2 {{channels 8 and weight [8,8,3,3] do not match groups 0}}
  // expected-error @+1 {{'cpc.conv2d' op failed to infer returned types}}
  %0 = cpc.conv2d %x, %w {strides = array<i64: 1, 1>, padding = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 0 : i64} : (tensor<1x8x10x10xf32>, tensor<8x8x3x3xf32>) -> tensor<1x8x8x8xf32>
  return
}

// -----

// Tests that conv2d bias must have one entry per output channel.
func.func @conv2d_bias_shape(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>, %b: tensor<3xf32>) {
  // expected-error @+2 {{bias must have shape [4]}}
  // expected-error @+1 {{'cpc.conv2d' op failed to infer returned types}}
  %0 = cpc.conv2d %x, %w, %b {strides = array<i64: 1, 1>, padding = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>, tensor<3xf32>) -> tensor<1x4x6x6xf32>
  return
}

// -----

// Tests that conv2d rejects zero strides.
func.func @conv2d_zero_stride(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) {
  // expected-error @+2 {{strides and dilations must be >= 1, paddings >= 0}}
  // expected-error @+1 {{'cpc.conv2d' op failed to infer returned types}}
  %0 = cpc.conv2d %x, %w {strides = array<i64: 0, 1>, padding = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x6x6xf32>
  return
}

// -----

// Tests that conv2d rejects negative padding.
func.func @conv2d_negative_padding(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) {
  // expected-error @+2 {{strides and dilations must be >= 1, paddings >= 0}}
  // expected-error @+1 {{'cpc.conv2d' op failed to infer returned types}}
  %0 = cpc.conv2d %x, %w {strides = array<i64: 1, 1>, padding = array<i64: 0, 0, 0, -1>, dilations = array<i64: 1, 1>} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x6x5xf32>
  return
}

// -----

// Tests that conv2d rejects a (dilated) kernel larger than the padded input.
func.func @conv2d_kernel_too_large(%x: tensor<1x3x4x4xf32>, %w: tensor<4x3x3x3xf32>) {
  // expected-error @+2 {{kernel larger than the padded input}}
  // expected-error @+1 {{'cpc.conv2d' op failed to infer returned types}}
  %0 = cpc.conv2d %x, %w {strides = array<i64: 1, 1>, padding = array<i64: 0, 0, 0, 0>, dilations = array<i64: 2, 2>} : (tensor<1x3x4x4xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x1x1xf32>
  return
}

// -----

// Tests that a wrongly declared conv2d output size is rejected.
func.func @conv2d_wrong_result(%x: tensor<2x3x224x224xf32>, %w: tensor<768x3x16x16xf32>) {
  // expected-error @+2 {{'cpc.conv2d' op inferred type(s) 'tensor<2x768x14x14xf32>' are incompatible with return type(s) of operation 'tensor<2x768x13x13xf32>'}}
  // expected-error @+1 {{'cpc.conv2d' op failed to infer returned types}}
  %0 = cpc.conv2d %x, %w {strides = array<i64: 16, 16>, padding = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<2x3x224x224xf32>, tensor<768x3x16x16xf32>) -> tensor<2x768x13x13xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// Data movement.
//===----------------------------------------------------------------------===//

// Tests that reshape must keep the element count.
func.func @reshape_count(%x: tensor<2x196x768xf32>) {
  // expected-error @+1 {{'cpc.reshape' op cannot reshape [2,196,768] (301056 elements) to [2,196,12,32]}}
  %0 = cpc.reshape %x : tensor<2x196x768xf32> -> tensor<2x196x12x32xf32>
  return
}

// -----

// Tests that reshape must keep the element type.
func.func @reshape_element_type(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{'cpc.reshape' op element types differ}}
  %0 = cpc.reshape %x : tensor<2x3xf32> -> tensor<6xi32>
  return
}

// -----

// Tests that a transpose permutation needs one entry per dim.
func.func @transpose_perm_size(%x: tensor<2x3x4xf32>) {
  // expected-error @+2 {{permutation size must equal the input rank}}
  // expected-error @+1 {{'cpc.transpose' op failed to infer returned types}}
  %0 = cpc.transpose %x {permutation = array<i64: 1, 0>} : tensor<2x3x4xf32> -> tensor<3x2x4xf32>
  return
}

// -----

// Tests that a transpose permutation must not repeat dims.
func.func @transpose_perm_repeat(%x: tensor<2x3x4xf32>) {
  // expected-error @+2 {{permutation must be a permutation of [0, rank)}}
  // expected-error @+1 {{'cpc.transpose' op failed to infer returned types}}
  %0 = cpc.transpose %x {permutation = array<i64: 0, 1, 1>} : tensor<2x3x4xf32> -> tensor<2x3x3xf32>
  return
}

// -----

// Tests that a transpose permutation must be in range.
func.func @transpose_perm_range(%x: tensor<2x3x4xf32>) {
  // expected-error @+2 {{permutation must be a permutation of [0, rank)}}
  // expected-error @+1 {{'cpc.transpose' op failed to infer returned types}}
  %0 = cpc.transpose %x {permutation = array<i64: 0, 3, 1>} : tensor<2x3x4xf32> -> tensor<2x4x3xf32>
  return
}

// -----

// Tests that slice needs one start, limit and stride per dim.
func.func @slice_sizes(%x: tensor<4x6xf32>) {
  // expected-error @+2 {{starts, limits and strides need one entry per input dim}}
  // expected-error @+1 {{'cpc.slice' op failed to infer returned types}}
  %0 = cpc.slice %x {starts = array<i64: 0>, limits = array<i64: 2, 6>, strides = array<i64: 1, 1>} : tensor<4x6xf32> -> tensor<2x6xf32>
  return
}

// -----

// Tests that a slice limit must not exceed the dim.
func.func @slice_limit_out_of_range(%x: tensor<4x6xf32>) {
  // expected-error @+2 {{dim 1: need 0 <= start <= limit <= 6 and stride >= 1}}
  // expected-error @+1 {{'cpc.slice' op failed to infer returned types}}
  %0 = cpc.slice %x {starts = array<i64: 0, 0>, limits = array<i64: 4, 7>, strides = array<i64: 1, 1>} : tensor<4x6xf32> -> tensor<4x7xf32>
  return
}

// -----

// Tests that a slice start must not exceed its limit.
func.func @slice_start_after_limit(%x: tensor<4x6xf32>) {
  // expected-error @+2 {{dim 0: need 0 <= start <= limit <= 4 and stride >= 1}}
  // expected-error @+1 {{'cpc.slice' op failed to infer returned types}}
  %0 = cpc.slice %x {starts = array<i64: 3, 0>, limits = array<i64: 2, 6>, strides = array<i64: 1, 1>} : tensor<4x6xf32> -> tensor<0x6xf32>
  return
}

// -----

// Tests that slice rejects a zero stride.
func.func @slice_zero_stride(%x: tensor<4x6xf32>) {
  // expected-error @+2 {{dim 1: need 0 <= start <= limit <= 6 and stride >= 1}}
  // expected-error @+1 {{'cpc.slice' op failed to infer returned types}}
  %0 = cpc.slice %x {starts = array<i64: 0, 0>, limits = array<i64: 4, 6>, strides = array<i64: 1, 0>} : tensor<4x6xf32> -> tensor<4x6xf32>
  return
}

// -----

// Tests that a strided slice result size is rounded up.
func.func @slice_wrong_result(%x: tensor<4x7xf32>) {
  // expected-error @+2 {{'cpc.slice' op inferred type(s) 'tensor<4x4xf32>' are incompatible with return type(s) of operation 'tensor<4x3xf32>'}}
  // expected-error @+1 {{'cpc.slice' op failed to infer returned types}}
  %0 = cpc.slice %x {starts = array<i64: 0, 0>, limits = array<i64: 4, 7>, strides = array<i64: 1, 2>} : tensor<4x7xf32> -> tensor<4x3xf32>
  return
}

// -----

// Tests that concat needs at least one input.
func.func @concat_empty() {
  // expected-error @+2 {{needs at least one input}}
  // expected-error @+1 {{'cpc.concat' op failed to infer returned types}}
  %0 = cpc.concat {axis = 0 : i64} : () -> tensor<0xf32>
  return
}

// -----

// Tests that concat axis must be within the rank.
func.func @concat_axis(%a: tensor<2x3xf32>) {
  // expected-error @+2 {{axis 2 out of range for rank 2}}
  // expected-error @+1 {{'cpc.concat' op failed to infer returned types}}
  %0 = cpc.concat %a, %a {axis = 2 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x6xf32>
  return
}

// -----

// Tests that concat inputs must agree outside the axis.
func.func @concat_dim_mismatch(%a: tensor<2x3xf32>, %b: tensor<2x4xf32>) {
  // expected-error @+2 {{inputs differ in dim 1 outside the axis}}
  // expected-error @+1 {{'cpc.concat' op failed to infer returned types}}
  %0 = cpc.concat %a, %b {axis = 0 : i64} : (tensor<2x3xf32>, tensor<2x4xf32>) -> tensor<4x3xf32>
  return
}

// -----

// Tests that concat inputs must share rank.
func.func @concat_rank_mismatch(%a: tensor<2x3xf32>, %b: tensor<3xf32>) {
  // expected-error @+2 {{inputs must share rank and element type}}
  // expected-error @+1 {{'cpc.concat' op failed to infer returned types}}
  %0 = cpc.concat %a, %b {axis = 0 : i64} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<3x3xf32>
  return
}

// -----

// Tests that concat inputs must share the element type.
func.func @concat_element_mismatch(%a: tensor<2x3xf32>, %b: tensor<2x3xf16>) {
  // expected-error @+2 {{inputs must share rank and element type}}
  // expected-error @+1 {{'cpc.concat' op failed to infer returned types}}
  %0 = cpc.concat %a, %b {axis = 0 : i64} : (tensor<2x3xf32>, tensor<2x3xf16>) -> tensor<4x3xf32>
  return
}

// -----

// Tests that broadcast rejects a dim that is neither 1 nor equal to the target.
func.func @broadcast_invalid(%x: tensor<3x4xf32>) {
  // expected-error @+1 {{'cpc.broadcast' op cannot broadcast [3,4] to [2,6,4]}}
  %0 = cpc.broadcast %x : tensor<3x4xf32> -> tensor<2x6x4xf32>
  return
}

// -----

// Tests that broadcast cannot lower the rank.
func.func @broadcast_to_lower_rank(%x: tensor<1x4xf32>) {
  // expected-error @+1 {{'cpc.broadcast' op cannot broadcast [1,4] to [4]}}
  %0 = cpc.broadcast %x : tensor<1x4xf32> -> tensor<4xf32>
  return
}

// -----

// Tests that broadcast keeps the element type.
func.func @broadcast_element_type(%x: tensor<4xf32>) {
  // expected-error @+1 {{'cpc.broadcast' op element types differ}}
  %0 = cpc.broadcast %x : tensor<4xf32> -> tensor<2x4xf16>
  return
}

// -----

// Tests that gather axis must be within the data rank.
func.func @gather_axis(%d: tensor<10x4xf32>, %i: tensor<3xi64>) {
  // expected-error @+2 {{axis 2 out of range for rank 2}}
  // expected-error @+1 {{'cpc.gather' op failed to infer returned types}}
  %0 = cpc.gather %d, %i {axis = 2 : i64} : (tensor<10x4xf32>, tensor<3xi64>) -> tensor<10x4x3xf32>
  return
}

// -----

// Tests that gather indices must be i32 or i64.
func.func @gather_float_indices(%d: tensor<10x4xf32>, %i: tensor<3xf32>) {
  // expected-error @+1 {{'cpc.gather' op operand #1 must be statically shaped tensor of 32-bit signless integer or 64-bit signless integer values, but got 'tensor<3xf32>'}}
  %0 = cpc.gather %d, %i {axis = 0 : i64} : (tensor<10x4xf32>, tensor<3xf32>) -> tensor<3x4xf32>
  return
}

// -----

// Tests that gather_elements axis must be within the data rank.
func.func @gather_elements_axis(%d: tensor<10x4xf32>, %i: tensor<10x2xi64>) {
  // expected-error @+2 {{axis 2 out of range for rank 2}}
  // expected-error @+1 {{'cpc.gather_elements' op failed to infer returned types}}
  %0 = cpc.gather_elements %d, %i {axis = 2 : i64} : (tensor<10x4xf32>, tensor<10x2xi64>) -> tensor<10x2xf32>
  return
}

// -----

// Tests that gather_elements indices must have the rank of data.
func.func @gather_elements_rank(%d: tensor<10x4xf32>, %i: tensor<10xi64>) {
  // expected-error @+2 {{indices must have the rank of data}}
  // expected-error @+1 {{'cpc.gather_elements' op failed to infer returned types}}
  %0 = cpc.gather_elements %d, %i {axis = 0 : i64} : (tensor<10x4xf32>, tensor<10xi64>) -> tensor<10xf32>
  return
}

// -----

// Tests that gather_elements indices must not exceed data outside the axis.
func.func @gather_elements_dim(%d: tensor<10x4xf32>, %i: tensor<2x5xi64>) {
  // expected-error @+2 {{indices dim 1 exceeds data}}
  // expected-error @+1 {{'cpc.gather_elements' op failed to infer returned types}}
  %0 = cpc.gather_elements %d, %i {axis = 0 : i64} : (tensor<10x4xf32>, tensor<2x5xi64>) -> tensor<2x5xf32>
  return
}

// -----

// Tests that scatter_nd updates must have shape indices.shape[:-1] + data.shape[k:].
func.func @scatter_nd_updates_shape(%d: tensor<4x5x6xf32>, %i: tensor<3x2xi64>, %u: tensor<3x5xf32>) {
  // expected-error @+2 {{updates must have shape [3,6] and the element type of data}}
  // expected-error @+1 {{'cpc.scatter_nd' op failed to infer returned types}}
  %0 = cpc.scatter_nd %d, %i, %u : (tensor<4x5x6xf32>, tensor<3x2xi64>, tensor<3x5xf32>) -> tensor<4x5x6xf32>
  return
}

// -----

// Tests that scatter_nd updates must have the element type of data.
func.func @scatter_nd_updates_type(%d: tensor<4x5xf32>, %i: tensor<3x2xi64>, %u: tensor<3xf16>) {
  // expected-error @+2 {{updates must have shape [3] and the element type of data}}
  // expected-error @+1 {{'cpc.scatter_nd' op failed to infer returned types}}
  %0 = cpc.scatter_nd %d, %i, %u : (tensor<4x5xf32>, tensor<3x2xi64>, tensor<3xf16>) -> tensor<4x5xf32>
  return
}

// -----

// Tests that scatter_nd indices must have rank >= 1.
func.func @scatter_nd_scalar_indices(%d: tensor<4xf32>, %i: tensor<i64>, %u: tensor<f32>) {
  // expected-error @+2 {{indices must have rank >= 1}}
  // expected-error @+1 {{'cpc.scatter_nd' op failed to infer returned types}}
  %0 = cpc.scatter_nd %d, %i, %u : (tensor<4xf32>, tensor<i64>, tensor<f32>) -> tensor<4xf32>
  return
}

// -----

// Tests that scatter_nd index tuples cannot be longer than the data rank.
func.func @scatter_nd_index_too_long(%d: tensor<4x5xf32>, %i: tensor<3x3xi64>, %u: tensor<3xf32>) {
  // expected-error @+2 {{indices' last dim must be in [1, rank(data)]}}
  // expected-error @+1 {{'cpc.scatter_nd' op failed to infer returned types}}
  %0 = cpc.scatter_nd %d, %i, %u : (tensor<4x5xf32>, tensor<3x3xi64>, tensor<3xf32>) -> tensor<4x5xf32>
  return
}

// -----

// Tests that scatter_nd rejects an unknown reduction.
func.func @scatter_nd_reduction(%d: tensor<4x5xf32>, %i: tensor<3x2xi64>, %u: tensor<3xf32>) {
  // expected-error @+2 {{reduction must be none, add or mul}}
  // expected-error @+1 {{'cpc.scatter_nd' op failed to infer returned types}}
  %0 = cpc.scatter_nd %d, %i, %u {reduction = #cpc.scatter_reduction<max>} : (tensor<4x5xf32>, tensor<3x2xi64>, tensor<3xf32>) -> tensor<4x5xf32>
  return
}

// -----

// Tests that topk k cannot exceed the axis size.
func.func @topk_k_too_large(%x: tensor<2x196xf32>) {
  // expected-error @+2 {{k = 200 out of range for dim 196}}
  // expected-error @+1 {{'cpc.topk' op failed to infer returned types}}
  %v, %i = cpc.topk %x {k = 200 : i64, axis = 1 : i64} : tensor<2x196xf32> -> tensor<2x200xf32>, tensor<2x200xi64>
  return
}

// -----

// Tests that topk rejects a negative k.
func.func @topk_k_negative(%x: tensor<2x196xf32>) {
  // expected-error @+2 {{k = -1 out of range for dim 196}}
  // expected-error @+1 {{'cpc.topk' op failed to infer returned types}}
  %v, %i = cpc.topk %x {k = -1 : i64, axis = 1 : i64} : tensor<2x196xf32> -> tensor<2x1xf32>, tensor<2x1xi64>
  return
}

// -----

// Tests that topk axis must be within the rank.
func.func @topk_axis(%x: tensor<2x196xf32>) {
  // expected-error @+2 {{axis 2 out of range for rank 2}}
  // expected-error @+1 {{'cpc.topk' op failed to infer returned types}}
  %v, %i = cpc.topk %x {k = 1 : i64, axis = 2 : i64} : tensor<2x196xf32> -> tensor<2x1xf32>, tensor<2x1xi64>
  return
}

// -----

// Tests that topk indices must be declared as i64.
func.func @topk_i32_indices(%x: tensor<2x196xf32>) {
  // expected-error @+1 {{'cpc.topk' op result #1 must be statically shaped tensor of 64-bit signless integer values, but got 'tensor<2x4xi32>'}}
  %v, %i = cpc.topk %x {k = 4 : i64, axis = 1 : i64} : tensor<2x196xf32> -> tensor<2x4xf32>, tensor<2x4xi32>
  return
}

// -----

// Tests that argsort axis must be within the rank.
func.func @argsort_axis(%x: tensor<2x196xf32>) {
  // expected-error @+2 {{axis 2 out of range for rank 2}}
  // expected-error @+1 {{'cpc.argsort' op failed to infer returned types}}
  %0 = cpc.argsort %x {axis = 2 : i64} : tensor<2x196xf32> -> tensor<2x196xi64>
  return
}

// -----

// Tests that conv2d rejects a weight whose element type differs from the input's.
func.func @conv2d_mixed_element_types(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x2x2xbf16>) {
  // expected-error @+2 {{input, weight and bias must share the element type}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = cpc.conv2d %x, %w {strides = array<i64: 2, 2>, padding = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<1x3x8x8xf32>, tensor<4x3x2x2xbf16>) -> tensor<1x4x4x4xf32>
  return
}

// -----

// Tests that all_gather's dim must be a dim of the input.
cpc.mesh @mesh shape = [2, 4] axes = ["dp", "tp"]
func.func @all_gather_dim_out_of_range(%x: tensor<3x4xf32>) {
  // expected-error @+1 {{'cpc.all_gather' op dim 2 is not a dim of the rank-2 input}}
  %0 = cpc.all_gather %x over @mesh ["dp"] {dim = 2 : i64} : tensor<3x4xf32> -> tensor<3x4xf32>
  return
}

// -----

// Tests that all_gather may only grow its dim: the other dims stay as they are.
cpc.mesh @mesh shape = [2, 4] axes = ["dp", "tp"]
func.func @all_gather_other_dim_grows(%x: tensor<3x4xf32>) {
  // expected-error @+1 {{'cpc.all_gather' op result must be the input with dim 1 multiplied by the number of ranks}}
  %0 = cpc.all_gather %x over @mesh ["dp"] {dim = 1 : i64} : tensor<3x4xf32> -> tensor<6x8xf32>
  return
}

// -----

// Tests that all_gather's dim grows by the size of its group (here tp = 4), not another factor.
cpc.mesh @mesh shape = [2, 4] axes = ["dp", "tp"]
func.func @all_gather_group_size(%x: tensor<3x4xf32>) {
  // expected-error @+1 {{'cpc.all_gather' op gathers 4 blocks, so dim 1 must grow by that factor}}
  %0 = cpc.all_gather %x over @mesh ["tp"] {dim = 1 : i64} : tensor<3x4xf32> -> tensor<3x8xf32>
  return
}

// -----

cpc.mesh @mesh shape = [2] axes = ["dp"]
// Tests that an all_gather of an empty dim is refused (its group size would be undefined).
func.func @all_gather_empty(%x: tensor<0xf32>) -> tensor<0xf32> {
  // expected-error @+1 {{'cpc.all_gather' op result must be the input with dim 0 multiplied by the number of ranks}}
  %0 = cpc.all_gather %x over @mesh ["dp"] : tensor<0xf32> -> tensor<0xf32>
  return %0 : tensor<0xf32>
}

// -----

//===----------------------------------------------------------------------===//
// TensorSizeLimit (every cpc op)
//===----------------------------------------------------------------------===//

// Tests that an operand larger than 2^48 bytes is refused (2^62 f32 elements would wrap
// byte counts to 0).
func.func @tensor_too_large(%a: tensor<2147483648x2147483648xf32>) {
  // expected-error @+1 {{operand #0: shape [2147483648, 2147483648] of 4-byte elements is larger than the largest tensor cpc supports (2^48 bytes)}}
  %0 = cpc.relu %a : tensor<2147483648x2147483648xf32>
  return
}

// -----

// Tests that a result whose element count overflows int64 is refused.
func.func @result_overflows(%a: tensor<1x1xf32>) {
  // expected-error @+1 {{result #0: shape [4611686018427387904, 4] of 4-byte elements is larger}}
  %0 = cpc.broadcast %a : tensor<1x1xf32> -> tensor<4611686018427387904x4xf32>
  return
}

// -----

// Tests that the largest tensor cpc supports (2^48 bytes) still verifies.
func.func @tensor_at_the_limit(%a: tensor<65536x1073741824xf32>) {
  %0 = cpc.relu %a : tensor<65536x1073741824xf32>
  return
}

// -----

// Tests that a mesh of more than 2^20 ranks is refused (axis-size products stay in range).
// expected-error @+1 {{has more than 1048576 ranks}}
cpc.mesh @mesh shape = [4294967296, 4294967296] axes = ["dp", "tp"]

// -----

// Tests that paddings whose sum overflows int64 are refused, not wrapped.
func.func @pad_overflows(%a: tensor<4xf32>) {
  // expected-error @+2 {{padded size of dim 0 overflows 64 bits}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = cpc.pad %a {low_padding = array<i64: 9223372036854775807>, high_padding = array<i64: 9223372036854775807>, interior_padding = array<i64: 0>} : tensor<4xf32> -> tensor<4xf32>
  return
}

// -----

// Tests that all_to_all needs two different dims.
cpc.mesh @mesh shape = [4] axes = ["tp"]
func.func @all_to_all_same_dim(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  // expected-error @+1 {{split_dim 1 and concat_dim 1 must be two different dims of the rank-2 input}}
  %0 = cpc.all_to_all %x over @mesh ["tp"] {split_dim = 1 : i64, concat_dim = 1 : i64} : tensor<8x8xf32> -> tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

// Tests that all_to_all's result divides one dim and multiplies the other by the group's size.
cpc.mesh @mesh shape = [4] axes = ["tp"]
func.func @all_to_all_group_size(%x: tensor<2x8xf32>) -> tensor<4x4xf32> {
  // expected-error @+1 {{exchanges blocks among 4 ranks, so dim 1 must shrink by that factor}}
  %0 = cpc.all_to_all %x over @mesh ["tp"] {split_dim = 1 : i64, concat_dim = 0 : i64} : tensor<2x8xf32> -> tensor<4x4xf32>
  return %0 : tensor<4x4xf32>
}

// -----

// Tests that all_to_all's result keeps the element count.
cpc.mesh @mesh shape = [4] axes = ["tp"]
func.func @all_to_all_shape(%x: tensor<2x8xf32>) -> tensor<4x2xf32> {
  // expected-error @+1 {{result must be the input with dim 1 divided and dim 0 multiplied by the number of ranks}}
  %0 = cpc.all_to_all %x over @mesh ["tp"] {split_dim = 1 : i64, concat_dim = 0 : i64} : tensor<2x8xf32> -> tensor<4x2xf32>
  return %0 : tensor<4x2xf32>
}

// -----

// Tests that a send's peer is a coordinate of its axis.
cpc.mesh @mesh shape = [2, 2] axes = ["dp", "pp"]
func.func @send_peer_outside(%x: tensor<4xf32>) {
  // expected-error @+1 {{peer 2 is not a coordinate of axis 'pp' (size 2)}}
  cpc.send %x to @mesh ["pp" = 2] channel 0 : tensor<4xf32>
  return
}

// -----

// Tests that a receive names an axis of its mesh and a channel >= 0.
cpc.mesh @mesh shape = [2, 2] axes = ["dp", "pp"]
func.func @recv_unknown_axis() -> tensor<4xf32> {
  // expected-error @+1 {{mesh @mesh has no axis 'tp'}}
  %0 = cpc.recv from @mesh ["tp" = 0] channel 0 : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

cpc.mesh @mesh shape = [2, 2] axes = ["dp", "pp"]
func.func @recv_negative_channel() -> tensor<4xf32> {
  // expected-error @+1 {{channel must be >= 0, got -1}}
  %0 = cpc.recv from @mesh ["pp" = 0] channel -1 : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

//===----------------------------------------------------------------------===//
// AttentionOp / AttentionGradOp::verify
//===----------------------------------------------------------------------===//

func.func @attention_head_dims_differ(%q: tensor<2x5x8xf32>, %k: tensor<2x7x4xf32>, %v: tensor<2x7x3xf32>) {
  // expected-error @+1 {{q and k must have the same last dim (8 vs 4)}}
  %o, %p = cpc.attention %q, %k, %v {scale = 1.0 : f64} : (tensor<2x5x8xf32>, tensor<2x7x4xf32>, tensor<2x7x3xf32>) -> (tensor<2x5x3xf32>, tensor<2x5x7xf32>)
  return
}

// -----

func.func @attention_keys_differ(%q: tensor<2x5x8xf32>, %k: tensor<2x7x8xf32>, %v: tensor<2x6x3xf32>) {
  // expected-error @+1 {{k and v must have as many rows (keys)}}
  %o, %p = cpc.attention %q, %k, %v {scale = 1.0 : f64} : (tensor<2x5x8xf32>, tensor<2x7x8xf32>, tensor<2x6x3xf32>) -> (tensor<2x5x3xf32>, tensor<2x5x7xf32>)
  return
}

// -----

func.func @attention_batch_broadcast(%q: tensor<2x5x8xf32>, %k: tensor<1x7x8xf32>, %v: tensor<1x7x3xf32>) {
  // expected-error @+1 {{q, k and v must have the same batch dims}}
  %o, %p = cpc.attention %q, %k, %v {scale = 1.0 : f64} : (tensor<2x5x8xf32>, tensor<1x7x8xf32>, tensor<1x7x3xf32>) -> (tensor<2x5x3xf32>, tensor<2x5x7xf32>)
  return
}

// -----

func.func @attention_wrong_probabilities(%q: tensor<2x5x8xf32>, %k: tensor<2x7x8xf32>, %v: tensor<2x7x3xf32>) {
  // expected-error @+1 {{probabilities must be 'tensor<2x5x7xf32>'}}
  %o, %p = cpc.attention %q, %k, %v {scale = 1.0 : f64} : (tensor<2x5x8xf32>, tensor<2x7x8xf32>, tensor<2x7x3xf32>) -> (tensor<2x5x3xf32>, tensor<2x5x5xf32>)
  return
}

// -----

func.func @attention_scale_not_finite(%q: tensor<2x5x8xf32>) {
  // expected-error @+1 {{scale must be finite}}
  %o, %p = cpc.attention %q, %q, %q {scale = 0x7FF0000000000000 : f64} : (tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<2x5x8xf32>) -> (tensor<2x5x8xf32>, tensor<2x5x5xf32>)
  return
}

// -----

func.func @attention_unknown_layout(%q: tensor<2x5x8xf32>) {
  // expected-error @+2 {{expected ::cpc::AttentionLayout to be one of: bhnd, bnhd}}
  // expected-error @+1 {{failed to parse Cpc_AttentionLayoutAttr parameter 'value'}}
  %o, %p = cpc.attention %q, %q, %q {layout = #cpc.attention_layout<bnd>, scale = 1.0 : f64} : (tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<2x5x8xf32>) -> (tensor<2x5x8xf32>, tensor<2x5x5xf32>)
  return
}

// -----

func.func @attention_token_major_heads_differ(%q: tensor<2x5x4x8xf32>, %k: tensor<2x7x2x8xf32>) {
  // expected-error @+1 {{q, k and v must have as many heads (dim -2)}}
  %o, %p = cpc.attention %q, %k, %k {layout = #cpc.attention_layout<bnhd>, scale = 1.0 : f64} : (tensor<2x5x4x8xf32>, tensor<2x7x2x8xf32>, tensor<2x7x2x8xf32>) -> (tensor<2x5x4x8xf32>, tensor<2x4x5x7xf32>)
  return
}

// -----

func.func @attention_token_major_probabilities(%q: tensor<2x5x4x8xf32>, %k: tensor<2x7x4x8xf32>) {
  // expected-error @+1 {{probabilities must be 'tensor<2x4x5x7xf32>'}}
  %o, %p = cpc.attention %q, %k, %k {layout = #cpc.attention_layout<bnhd>, scale = 1.0 : f64} : (tensor<2x5x4x8xf32>, tensor<2x7x4x8xf32>, tensor<2x7x4x8xf32>) -> (tensor<2x5x4x8xf32>, tensor<2x5x4x7xf32>)
  return
}

// -----

func.func @attention_token_major_rank(%q: tensor<5x8xf32>) {
  // expected-error @+1 {{needs q, k and v of one rank >= 3}}
  %o, %p = cpc.attention %q, %q, %q {layout = #cpc.attention_layout<bnhd>, scale = 1.0 : f64} : (tensor<5x8xf32>, tensor<5x8xf32>, tensor<5x8xf32>) -> (tensor<5x8xf32>, tensor<5x5xf32>)
  return
}

// -----

func.func @attention_grad_wrong_gradient(%q: tensor<2x5x8xf32>, %p: tensor<2x5x5xf32>, %g: tensor<2x5x8xf32>) {
  // expected-error @+1 {{each gradient must have its operand's type}}
  %dq, %dk, %dv = cpc.attention_grad %q, %q, %q, %p, %g {scale = 1.0 : f64} : (tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<2x5x5xf32>, tensor<2x5x8xf32>) -> (tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<2x5x8xf16>)
  return
}

// -----

func.func @adamw_grad_scale_not_scalar(%g: tensor<4xf32>, %lr: tensor<f32>) {
  // expected-error @+2 {{grad_scale must be a rank-0 tensor of the gradient's element type}}
  // expected-error @+1 {{'cpc.adamw' op failed to infer returned types}}
  %p, %m, %v = cpc.adamw %g, %g, %g, %g, %lr, %lr grad_scale %g {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<f32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

func.func @multi_tensor_adamw_decays(%w: tensor<4xf32>, %s: tensor<f32>) {
  // expected-error @+1 {{needs one weight decay per tensor (1), got 2}}
  %u:3 = cpc.multi_tensor_adamw %s, %s, %s, [%w, %w, %w, %w] {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decays = array<f64: 0.0, 0.1>} : (tensor<f32>, tensor<f32>, tensor<f32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

func.func @multi_tensor_adamw_types(%w: tensor<4xf32>, %g: tensor<5xf32>, %s: tensor<f32>) {
  // expected-error @+1 {{tensor 0: param, grad, moments and results must have one type}}
  %u:3 = cpc.multi_tensor_adamw %s, %s, %s, [%w, %g, %w, %w] {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decays = array<f64: 0.0>} : (tensor<f32>, tensor<f32>, tensor<f32>, tensor<4xf32>, tensor<5xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

func.func @multi_tensor_adamw_count(%w: tensor<4xf32>, %s: tensor<f32>) {
  // expected-error @+1 {{needs 4 N tensors (params, grads, exp_avg, exp_avg_sq) and 3 N results}}
  %u:3 = cpc.multi_tensor_adamw %s, %s, %s, [%w, %w, %w] {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decays = array<f64: 0.0>} : (tensor<f32>, tensor<f32>, tensor<f32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

func.func @add_layer_norm_broadcast(%x: tensor<4x8xf32>, %row: tensor<8xf32>, %s: tensor<8xf32>) {
  // expected-error @+1 {{lhs, rhs, sum and result must have one type (no broadcasting)}}
  %sum, %n = cpc.add_layer_norm %x, %row, %s, %s {axis = 1 : i64, epsilon = 1.0e-6 : f64} : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>)
  return
}

// -----

func.func @add_layer_norm_bf16(%x: tensor<4x8xbf16>, %s: tensor<8xbf16>) {
  // expected-error @+1 {{is fused for f32 and f64 only}}
  %sum, %n = cpc.add_layer_norm %x, %x, %s, %s {axis = 1 : i64, epsilon = 1.0e-6 : f64} : (tensor<4x8xbf16>, tensor<4x8xbf16>, tensor<8xbf16>, tensor<8xbf16>) -> (tensor<4x8xbf16>, tensor<4x8xbf16>)
  return
}

// -----

func.func @add_layer_norm_scale_shape(%x: tensor<4x8xf32>, %s: tensor<4xf32>) {
  // expected-error @+1 {{scale, bias and their gradients must be 'tensor<8xf32>'}}
  %sum, %n = cpc.add_layer_norm %x, %x, %s, %s {axis = 1 : i64, epsilon = 1.0e-6 : f64} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>)
  return
}

// -----

func.func @layer_norm_grad_add_addend(%x: tensor<4x8xf32>, %s: tensor<8xf32>, %r: tensor<8xf32>) {
  // expected-error @+1 {{input, grad, addend and input_grad must have one type (no broadcasting)}}
  %dx, %ds, %db = cpc.layer_norm_grad_add %x, %s, %x, %r {axis = 1 : i64, epsilon = 1.0e-5 : f64} : (tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  return
}

// -----

func.func @layer_norm_grad_add_axis(%x: tensor<4x8xf32>, %s: tensor<8xf32>) {
  // expected-error @+1 {{axis 2 is out of range for rank 2}}
  %dx, %ds, %db = cpc.layer_norm_grad_add %x, %s, %x, %x {axis = 2 : i64, epsilon = 1.0e-5 : f64} : (tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  return
}

// -----

// Tests that a mesh's roles name one role per axis.
// expected-error @+1 {{'cpc.mesh' op needs one role per axis, got 1 for 2}}
cpc.mesh @mesh shape = [2, 2] axes = ["r", "c"] roles = [#cpc.axis_role<tensor_row>]

// -----

// Tests that no two axes of a mesh share a role (none aside).
// expected-error @+1 {{'cpc.mesh' op has two axes with role tensor_row}}
cpc.mesh @mesh shape = [2, 2, 2] axes = ["a", "b", "c"] roles = [#cpc.axis_role<none>, #cpc.axis_role<tensor_row>, #cpc.axis_role<tensor_row>]
