// RUN: cpc-opt %s -split-input-file -verify-diagnostics --cpc-tensor-parallel="tp=2" | FileCheck %s
// RUN: cpc-opt %s -split-input-file --cpc-tensor-parallel="tp=2 sp=true" 2>/dev/null | FileCheck %s --check-prefix=SP

// Tests the Megatron pattern on one MLP found from its structure: Linear (a transposed weight
// operand, as torch's Linear) -> GELU -> Linear. The first weight and its bias are split by
// output features (column-parallel), the second weight by input features (row-parallel); its
// bias stays whole. The mesh is dp x tp.
// CHECK: cpc.mesh @mesh shape = [1, 2] axes = ["dp", "tp"]
// CHECK-LABEL: func.func @mlp
// CHECK: cpc.parameter @fc1.weight {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"tp"], []], priority = 1>]} : tensor<16x8xf32>
// CHECK: cpc.parameter @fc1.bias {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"tp"]], priority = 1>]} : tensor<16xf32>
// CHECK: cpc.parameter @fc2.weight {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}], ["tp"]], priority = 1>]} : tensor<8x16xf32>
// CHECK: cpc.parameter @fc2.bias : tensor<8xf32>
cpc.variable @fc1.weight trainable : tensor<16x8xf32>
cpc.variable @fc1.bias trainable : tensor<16xf32>
cpc.variable @fc2.weight trainable : tensor<8x16xf32>
cpc.variable @fc2.bias trainable : tensor<8xf32>
func.func @mlp(%x: tensor<4x8xf32>) -> tensor<4x8xf32> attributes {cpc.phase = #cpc.phase<train_step>} {
  %w1 = cpc.parameter @fc1.weight : tensor<16x8xf32>
  %b1 = cpc.parameter @fc1.bias : tensor<16xf32>
  %w2 = cpc.parameter @fc2.weight : tensor<8x16xf32>
  %b2 = cpc.parameter @fc2.bias : tensor<8xf32>
  %h = cpc.matmul %x, %w1 {transpose_rhs = true} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %hb = cpc.add %b1, %h : (tensor<16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %a = cpc.gelu %hb : tensor<4x16xf32>
  %y = cpc.matmul %a, %w2 {transpose_rhs = true} : (tensor<4x16xf32>, tensor<8x16xf32>) -> tensor<4x8xf32>
  %yb = cpc.add %b2, %y : (tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %yb : tensor<4x8xf32>
}

// -----

// Tests the pattern with torch's pre-transposed MatMul weights ([in, out], how Linear exports on
// 3-D inputs): the column split is then dim 1 of the first weight, the row split dim 0 of the
// second.
// CHECK-LABEL: func.func @pretransposed
// CHECK: cpc.parameter @"onnx::MatMul_1" {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}], ["tp"]], priority = 1>]} : tensor<8x16xf32>
// CHECK: cpc.parameter @"onnx::MatMul_2" {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"tp"], []], priority = 1>]} : tensor<16x8xf32>
cpc.variable @"onnx::MatMul_1" trainable : tensor<8x16xf32>
cpc.variable @"onnx::MatMul_2" trainable : tensor<16x8xf32>
func.func @pretransposed(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> attributes {cpc.phase = #cpc.phase<train_step>} {
  %w1 = cpc.parameter @"onnx::MatMul_1" : tensor<8x16xf32>
  %w2 = cpc.parameter @"onnx::MatMul_2" : tensor<16x8xf32>
  %h = cpc.matmul %x, %w1 : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  %a = cpc.relu %h : tensor<2x4x16xf32>
  %y = cpc.matmul %a, %w2 : (tensor<2x4x16xf32>, tensor<16x8xf32>) -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// -----

// Tests that an MLP whose hidden size does not divide by tp stays replicated, with a note.
// CHECK-LABEL: func.func @odd_hidden
// CHECK: cpc.parameter @w1 : tensor<5x8xf32>
// CHECK: cpc.parameter @w2 : tensor<8x5xf32>
cpc.variable @w1 trainable : tensor<5x8xf32>
cpc.variable @w2 trainable : tensor<8x5xf32>
func.func @odd_hidden(%x: tensor<4x8xf32>) -> tensor<4x8xf32> attributes {cpc.phase = #cpc.phase<train_step>} {
  %w1 = cpc.parameter @w1 : tensor<5x8xf32>
  %w2 = cpc.parameter @w2 : tensor<8x5xf32>
  // expected-remark @+1 {{the MLP of 'w1' stays replicated: its 5 hidden features do not split over tp=2}}
  %h = cpc.matmul %x, %w1 {transpose_rhs = true} : (tensor<4x8xf32>, tensor<5x8xf32>) -> tensor<4x5xf32>
  %a = cpc.gelu %h : tensor<4x5xf32>
  %y = cpc.matmul %a, %w2 {transpose_rhs = true} : (tensor<4x5xf32>, tensor<8x5xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// Tests sequence parallelism: the LayerNorm feeding a split MLP is split along the sequence
// (dim 1 of [B, N, D]) over tp at priority 2, after the weights.
// CHECK-LABEL: func.func @sp_block
// CHECK: cpc.layer_norm
// CHECK-NOT: cpc.shardings
// CHECK: return
// SP-LABEL: func.func @sp_block
// SP: cpc.layer_norm {{.*}}cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}], ["tp"], []], priority = 2>]
cpc.variable @w1 trainable : tensor<16x8xf32>
cpc.variable @w2 trainable : tensor<8x16xf32>
func.func @sp_block(%x: tensor<2x4x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<2x4x8xf32> attributes {cpc.phase = #cpc.phase<train_step>} {
  %w1 = cpc.parameter @w1 : tensor<16x8xf32>
  %w2 = cpc.parameter @w2 : tensor<8x16xf32>
  %n = cpc.layer_norm %x, %g, %b {axis = 2 : i64, epsilon = 1.0e-5 : f64} : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %h = cpc.matmul %n, %w1 {transpose_rhs = true} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  %a = cpc.gelu %h : tensor<2x4x16xf32>
  %y = cpc.matmul %a, %w2 {transpose_rhs = true} : (tensor<2x4x16xf32>, tensor<8x16xf32>) -> tensor<2x4x8xf32>
  %r = cpc.add %x, %y : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %r : tensor<2x4x8xf32>
}

// -----

// Tests the Megatron pattern on one attention block: the fused qkv Linear kept head-major (as
// cpc-head-major-qkv leaves it) is column-parallel, weight and bias; the first Linear its heads
// reach, the output projection, is row-parallel; its bias stays whole.
// CHECK-LABEL: func.func @attention
// CHECK: cpc.parameter @qkv.weight {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"tp"], []], priority = 1>]} : tensor<24x8xf32>
// CHECK: cpc.parameter @qkv.bias {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"tp"]], priority = 1>]} : tensor<24xf32>
// CHECK: cpc.parameter @proj.weight {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}], ["tp"]], priority = 1>]} : tensor<8x8xf32>
// CHECK: cpc.parameter @proj.bias : tensor<8xf32>
cpc.variable @qkv.weight trainable {stored_perm = array<i64: 1, 0, 2, 3>, stored_view = array<i64: 3, 2, 4, 8>} : tensor<24x8xf32>
cpc.variable @qkv.bias trainable {stored_perm = array<i64: 1, 0, 2>, stored_view = array<i64: 3, 2, 4>} : tensor<24xf32>
cpc.variable @proj.weight trainable : tensor<8x8xf32>
cpc.variable @proj.bias trainable : tensor<8xf32>
func.func @attention(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> attributes {cpc.phase = #cpc.phase<train_step>} {
  %w = cpc.parameter @qkv.weight : tensor<24x8xf32>
  %b = cpc.parameter @qkv.bias : tensor<24xf32>
  %pw = cpc.parameter @proj.weight : tensor<8x8xf32>
  %pb = cpc.parameter @proj.bias : tensor<8xf32>
  %i0 = cpc.constant dense<0> : tensor<i64>
  %i1 = cpc.constant dense<1> : tensor<i64>
  %i2 = cpc.constant dense<2> : tensor<i64>
  %y = cpc.matmul %x, %w {transpose_rhs = true} : (tensor<2x4x8xf32>, tensor<24x8xf32>) -> tensor<2x4x24xf32>
  %yb = cpc.add %b, %y : (tensor<24xf32>, tensor<2x4x24xf32>) -> tensor<2x4x24xf32>
  %g = cpc.reshape %yb : tensor<2x4x24xf32> -> tensor<2x4x2x3x4xf32>
  %t = cpc.transpose %g {permutation = array<i64: 3, 0, 2, 1, 4>} : tensor<2x4x2x3x4xf32> -> tensor<3x2x2x4x4xf32>
  %q = cpc.gather %t, %i0 {axis = 0 : i64} : (tensor<3x2x2x4x4xf32>, tensor<i64>) -> tensor<2x2x4x4xf32>
  %k = cpc.gather %t, %i1 {axis = 0 : i64} : (tensor<3x2x2x4x4xf32>, tensor<i64>) -> tensor<2x2x4x4xf32>
  %v = cpc.gather %t, %i2 {axis = 0 : i64} : (tensor<3x2x2x4x4xf32>, tensor<i64>) -> tensor<2x2x4x4xf32>
  %s = cpc.matmul %q, %k {transpose_rhs = true} : (tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
  %p = cpc.softmax %s {axis = 3 : i64} : tensor<2x2x4x4xf32>
  %o = cpc.matmul %p, %v : (tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
  %ot = cpc.transpose %o {permutation = array<i64: 0, 2, 1, 3>} : tensor<2x2x4x4xf32> -> tensor<2x4x2x4xf32>
  %m = cpc.reshape %ot : tensor<2x4x2x4xf32> -> tensor<2x4x8xf32>
  %z = cpc.matmul %m, %pw {transpose_rhs = true} : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %zb = cpc.add %pb, %z : (tensor<8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %zb : tensor<2x4x8xf32>
}

// -----

// Tests vocab parallelism: a token embedding (a table gathered along its rows at an integer
// input) is split by rows over tp, whether or not an output head reads it too.
// CHECK-LABEL: func.func @embedding
// CHECK: cpc.parameter @tok.weight {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"tp"], []], priority = 1>]} : tensor<16x8xf32>
cpc.variable @tok.weight trainable : tensor<16x8xf32>
func.func @embedding(%ids: tensor<2x4xi64>) -> tensor<2x4x16xf32> attributes {cpc.phase = #cpc.phase<train_step>} {
  %t = cpc.parameter @tok.weight : tensor<16x8xf32>
  %e = cpc.gather %t, %ids {axis = 0 : i64} : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  %logits = cpc.matmul %e, %t {transpose_rhs = true} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  return %logits : tensor<2x4x16xf32>
}

// -----

// Tests that a table whose rows do not divide by tp stays whole, with a note.
// CHECK-LABEL: func.func @odd_vocabulary
// CHECK: cpc.parameter @tok.weight : tensor<15x8xf32>
cpc.variable @tok.weight trainable : tensor<15x8xf32>
func.func @odd_vocabulary(%ids: tensor<2x4xi64>) -> tensor<2x4x8xf32> attributes {cpc.phase = #cpc.phase<train_step>} {
  %t = cpc.parameter @tok.weight : tensor<15x8xf32>
  // expected-remark @+1 {{the embedding 'tok.weight' stays replicated: its 15 rows do not split over tp=2}}
  %e = cpc.gather %t, %ids {axis = 0 : i64} : (tensor<15x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  return %e : tensor<2x4x8xf32>
}
