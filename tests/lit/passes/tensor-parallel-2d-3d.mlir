// RUN: cpc-opt %s -split-input-file -verify-diagnostics --cpc-tensor-parallel="tp=4 mode=2d" | FileCheck %s
// RUN: cpc-opt %s -split-input-file --cpc-tensor-parallel="tp=8 mode=2.5d depth=2" 2>/dev/null | FileCheck %s --check-prefix=DEPTH
// RUN: cpc-opt %s -split-input-file --cpc-tensor-parallel="tp=8 mode=3d" 2>/dev/null | FileCheck %s --check-prefix=CUBE
// RUN: not cpc-opt %s --split-input-file --cpc-tensor-parallel="tp=4 mode=5d" 2>&1 | FileCheck %s --check-prefix=BADMODE
// RUN: not cpc-opt %s --split-input-file --cpc-training-pipeline="tp=4 tp-mode=5d" 2>&1 | FileCheck %s --check-prefix=BADMODE

// Tests that a tensor-parallel mode is one of the enum's cases.
// BADMODE: option: Cannot find option named '5d'!

// Tests the seeds of 2D tensor parallelism (Optimus, q = 2): the mesh is dp x tp_row x tp_col (the
// latter two with the tensor_row and tensor_col roles, by which SUMMA finds them), every
// Linear's weight is split [in over tp_row, out over tp_col] (torch's [out, in] and the
// pre-transposed [in, out] alike), its bias stored over (tp_col, tp_row) and read over tp_col
// through a cpc.shard, and its result [batch over tp_row, ..., out over tp_col]; a weight read
// again by a later matmul (its gradient's) keeps the first placement. With 2.5d the mesh has the depth axis and the batch is split over tp_dep x tp_row.
// CHECK: cpc.mesh @mesh shape = [1, 2, 2] axes = ["dp", "tp_row", "tp_col"] roles = [#cpc.axis_role<none>, #cpc.axis_role<tensor_row>, #cpc.axis_role<tensor_col>]
// CHECK-LABEL: func.func @mlp
// CHECK: cpc.parameter @fc1.weight {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"tp_col"], ["tp_row"]], priority = 1>]} : tensor<16x8xf32>
// CHECK: %[[B:.*]] = cpc.parameter @fc1.bias {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"tp_col", "tp_row"]], priority = 1>]} : tensor<16xf32>
// CHECK: cpc.parameter @fc2.weight {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"tp_row"], ["tp_col"]], priority = 1>]} : tensor<16x8xf32>
// CHECK: cpc.matmul {{.*}}cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"tp_row"], [], ["tp_col"]], priority = 1>]
// CHECK: %[[READ:.*]] = cpc.shard %[[B]] to <@mesh, {{\[\[}}"tp_col"]], priority = 1> : tensor<16xf32>
// CHECK: cpc.add %[[READ]],
// CHECK: cpc.matmul {{.*}}cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"tp_row"], [], ["tp_col"]], priority = 1>]
// CHECK: cpc.matmul %{{[0-9]+}}, %{{[0-9]+}} {transpose_rhs = true} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
// With 3d the mesh is dp x tp_wt x tp_in x tp_out; the first Linear's input has its features over
// tp_out, so its weight is [in over (tp_out, tp_wt), out over tp_in]; the second Linear finds
// them swapped: [in over (tp_in, tp_wt), out over tp_out].
// CUBE: cpc.mesh @mesh shape = [1, 2, 2, 2] axes = ["dp", "tp_wt", "tp_in", "tp_out"] roles = [#cpc.axis_role<none>, #cpc.axis_role<tensor_weight>, #cpc.axis_role<tensor_input>, #cpc.axis_role<tensor_output>]
// CUBE: cpc.parameter @fc1.weight {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"tp_in"], ["tp_out", "tp_wt"]], priority = 1>]}
// CUBE: cpc.parameter @fc1.bias {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"tp_in"]], priority = 1>]}
// CUBE: cpc.parameter @fc2.weight {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"tp_in", "tp_wt"], ["tp_out"]], priority = 1>]}
// DEPTH: cpc.mesh @mesh shape = [1, 2, 2, 2] axes = ["dp", "tp_dep", "tp_row", "tp_col"] roles = [#cpc.axis_role<none>, #cpc.axis_role<tensor_depth>, #cpc.axis_role<tensor_row>, #cpc.axis_role<tensor_col>]
// DEPTH: cpc.parameter @fc1.weight {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"tp_col"], ["tp_row"]], priority = 1>]}
cpc.variable @fc1.weight trainable : tensor<16x8xf32>
cpc.variable @fc1.bias trainable : tensor<16xf32>
cpc.variable @fc2.weight trainable : tensor<16x8xf32>
func.func @mlp(%x: tensor<2x4x8xf32>) -> tensor<2x4x16xf32> attributes {cpc.phase = #cpc.phase<train_step>} {
  %w1 = cpc.parameter @fc1.weight : tensor<16x8xf32>
  %b1 = cpc.parameter @fc1.bias : tensor<16xf32>
  %w2 = cpc.parameter @fc2.weight : tensor<16x8xf32>
  %h = cpc.matmul %x, %w1 {transpose_rhs = true} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  %hb = cpc.add %b1, %h : (tensor<16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  %a = cpc.gelu %hb : tensor<2x4x16xf32>
  %y = cpc.matmul %a, %w2 : (tensor<2x4x16xf32>, tensor<16x8xf32>) -> tensor<2x4x8xf32>
  %g = cpc.matmul %y, %w2 {transpose_rhs = true} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  return %g : tensor<2x4x16xf32>
}

// -----

// Tests that a Linear whose weight does not split into q x q blocks stays replicated, with a note.
cpc.variable @head.weight trainable : tensor<5x8xf32>
func.func @odd(%x: tensor<2x4x8xf32>) -> tensor<2x4x5xf32> attributes {cpc.phase = #cpc.phase<train_step>} {
  %w = cpc.parameter @head.weight : tensor<5x8xf32>
  // expected-remark @+1 {{the Linear of 'head.weight' stays replicated: its 8x5 weight does not split into 2x2 blocks}}
  %y = cpc.matmul %x, %w {transpose_rhs = true} : (tensor<2x4x8xf32>, tensor<5x8xf32>) -> tensor<2x4x5xf32>
  return %y : tensor<2x4x5xf32>
}
