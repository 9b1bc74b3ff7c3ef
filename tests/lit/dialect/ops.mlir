// RUN: cpc-opt %s | cpc-opt | FileCheck %s
// RUN: cpc-opt %s --mlir-print-op-generic | cpc-opt | FileCheck %s

// Tests that meshes (a 3-d dp/pp/tp grid, a 1-d one, one with axis roles) round-trip at module
// level.
// CHECK: cpc.mesh @mesh shape = [2, 2, 4] axes = ["dp", "pp", "tp"]
// CHECK: cpc.mesh @ring shape = [8] axes = ["x"]
// CHECK: cpc.mesh @grid shape = [2, 2, 2] axes = ["dp", "r", "c"] roles = [#cpc.axis_role<none>, #cpc.axis_role<tensor_row>, #cpc.axis_role<tensor_col>]

cpc.mesh @mesh shape = [2, 2, 4] axes = ["dp", "pp", "tp"]
cpc.mesh @ring shape = [8] axes = ["x"]
cpc.mesh @grid shape = [2, 2, 2] axes = ["dp", "r", "c"] roles = [#cpc.axis_role<none>, #cpc.axis_role<tensor_row>, #cpc.axis_role<tensor_col>]

// Tests that variables round-trip at module level: parameters (trainable float, frozen float,
// frozen integer, a sharded one kept in head-major order, a name that is no bare identifier)
// and states (a role, a start value, a ZeRO-3 block of the flattened value).
// CHECK: cpc.variable @blocks.0.norm1.weight trainable : tensor<768xf32>
// CHECK: cpc.variable @pos_embed : tensor<1x196x768xf32>
// CHECK: cpc.variable @mask_ids : tensor<3xi64>
// CHECK: cpc.variable @qkv trainable {global_shape = array<i64: 24, 8>, sharding = #cpc.sharding<@mesh, {{\[\[}}"tp"], []]>, stored_perm = array<i64: 1, 0, 2, 3>, stored_view = array<i64: 3, 2, 4, 8>} : tensor<6x8xf32>
// CHECK: cpc.variable @"onnx::MatMul_7" trainable : tensor<8x8xf32>
// CHECK: cpc.variable @amp.loss_scale state <loss_scale> {init = 6.553600e+04 : f64} : tensor<f32>
// CHECK: cpc.variable @adamw.exp_avg.qkv state <exp_avg> {global_shape = array<i64: 24, 8>, sharding = #cpc.sharding<@mesh, {{\[\[}}"dp"]]>} : tensor<96xf32>
cpc.variable @blocks.0.norm1.weight trainable : tensor<768xf32>
cpc.variable @pos_embed : tensor<1x196x768xf32>
cpc.variable @mask_ids : tensor<3xi64>
cpc.variable @qkv trainable {global_shape = array<i64: 24, 8>, sharding = #cpc.sharding<@mesh, [["tp"], []]>, stored_perm = array<i64: 1, 0, 2, 3>, stored_view = array<i64: 3, 2, 4, 8>} : tensor<6x8xf32>
cpc.variable @"onnx::MatMul_7" trainable : tensor<8x8xf32>
cpc.variable @amp.loss_scale state <loss_scale> {init = 65536.0 : f64} : tensor<f32>
cpc.variable @adamw.exp_avg.qkv state <exp_avg> {global_shape = array<i64: 24, 8>, sharding = #cpc.sharding<@mesh, [["dp"]]>} : tensor<96xf32>

//===----------------------------------------------------------------------===//
// Values with no operands.

// Tests that constants round-trip: a rank-0 float splat and a dense integer matrix.
// CHECK-LABEL: func.func @constant
// CHECK: cpc.constant dense<5.000000e-01> : tensor<f32>
// CHECK: cpc.constant dense<{{\[\[}}1, 2], [3, 4]]> : tensor<2x2xi64>
func.func @constant() -> (tensor<f32>, tensor<2x2xi64>) {
  %0 = cpc.constant dense<0.5> : tensor<f32>
  %1 = cpc.constant dense<[[1, 2], [3, 4]]> : tensor<2x2xi64>
  return %0, %1 : tensor<f32>, tensor<2x2xi64>
}

// Tests that parameter reads name their variable.
// CHECK-LABEL: func.func @parameter
// CHECK: cpc.parameter @blocks.0.norm1.weight : tensor<768xf32>
// CHECK: cpc.parameter @pos_embed : tensor<1x196x768xf32>
// CHECK: cpc.parameter @mask_ids : tensor<3xi64>
func.func @parameter() -> (tensor<768xf32>, tensor<1x196x768xf32>, tensor<3xi64>) {
  %0 = cpc.parameter @blocks.0.norm1.weight : tensor<768xf32>
  %1 = cpc.parameter @pos_embed : tensor<1x196x768xf32>
  %2 = cpc.parameter @mask_ids : tensor<3xi64>
  return %0, %1, %2 : tensor<768xf32>, tensor<1x196x768xf32>, tensor<3xi64>
}

// Tests that random_uniform keeps low, high and seed.
// CHECK-LABEL: func.func @random_uniform
// CHECK: cpc.random_uniform {high = 1.000000e+00 : f64, low = 0.000000e+00 : f64, seed = 42 : i64} : tensor<2x196xf32>
// CHECK: cpc.random_uniform {high = 5.000000e-01 : f64, low = -5.000000e-01 : f64, seed = 0 : i64} : tensor<4xbf16>
func.func @random_uniform() -> (tensor<2x196xf32>, tensor<4xbf16>) {
  %0 = cpc.random_uniform {low = 0.0 : f64, high = 1.0 : f64, seed = 42 : i64} : tensor<2x196xf32>
  %1 = cpc.random_uniform {low = -0.5 : f64, high = 0.5 : f64, seed = 0 : i64} : tensor<4xbf16>
  return %0, %1 : tensor<2x196xf32>, tensor<4xbf16>
}

//===----------------------------------------------------------------------===//
// Elementwise.

// Tests that every float unary op round-trips.
// CHECK-LABEL: func.func @unary_float
// CHECK: %[[NEG:.*]] = cpc.neg %{{.*}} : tensor<2x3xf32>
// CHECK: %[[ABS:.*]] = cpc.abs %[[NEG]] : tensor<2x3xf32>
// CHECK: %[[EXP:.*]] = cpc.exp %[[ABS]] : tensor<2x3xf32>
// CHECK: %[[LOG:.*]] = cpc.log %[[EXP]] : tensor<2x3xf32>
// CHECK: %[[SQRT:.*]] = cpc.sqrt %[[LOG]] : tensor<2x3xf32>
// CHECK: %[[RSQRT:.*]] = cpc.rsqrt %[[SQRT]] : tensor<2x3xf32>
// CHECK: %[[RCP:.*]] = cpc.reciprocal %[[RSQRT]] : tensor<2x3xf32>
// CHECK: %[[ERF:.*]] = cpc.erf %[[RCP]] : tensor<2x3xf32>
// CHECK: %[[TANH:.*]] = cpc.tanh %[[ERF]] : tensor<2x3xf32>
// CHECK: %[[SIG:.*]] = cpc.sigmoid %[[TANH]] : tensor<2x3xf32>
// CHECK: %[[RELU:.*]] = cpc.relu %[[SIG]] : tensor<2x3xf32>
// CHECK: return %[[RELU]]
func.func @unary_float(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = cpc.neg %x : tensor<2x3xf32>
  %1 = cpc.abs %0 : tensor<2x3xf32>
  %2 = cpc.exp %1 : tensor<2x3xf32>
  %3 = cpc.log %2 : tensor<2x3xf32>
  %4 = cpc.sqrt %3 : tensor<2x3xf32>
  %5 = cpc.rsqrt %4 : tensor<2x3xf32>
  %6 = cpc.reciprocal %5 : tensor<2x3xf32>
  %7 = cpc.erf %6 : tensor<2x3xf32>
  %8 = cpc.tanh %7 : tensor<2x3xf32>
  %9 = cpc.sigmoid %8 : tensor<2x3xf32>
  %10 = cpc.relu %9 : tensor<2x3xf32>
  return %10 : tensor<2x3xf32>
}

// Tests that neg and abs also accept integer tensors.
// CHECK-LABEL: func.func @unary_int
// CHECK: cpc.neg %{{.*}} : tensor<4xi32>
// CHECK: cpc.abs %{{.*}} : tensor<4xi32>
func.func @unary_int(%x: tensor<4xi32>) -> tensor<4xi32> {
  %0 = cpc.neg %x : tensor<4xi32>
  %1 = cpc.abs %0 : tensor<4xi32>
  return %1 : tensor<4xi32>
}

// Tests that gelu elides the default approximate = #cpc.gelu_approximation<none> and keeps "tanh".
// CHECK-LABEL: func.func @gelu
// CHECK: cpc.gelu %{{.*}} : tensor<2x8xbf16>
// CHECK-NOT: approximate = #cpc.gelu_approximation<none>
// CHECK: cpc.gelu %{{.*}} {approximate = #cpc.gelu_approximation<tanh>} : tensor<2x8xbf16>
func.func @gelu(%x: tensor<2x8xbf16>) -> (tensor<2x8xbf16>, tensor<2x8xbf16>) {
  %0 = cpc.gelu %x : tensor<2x8xbf16>
  %1 = cpc.gelu %x {approximate = #cpc.gelu_approximation<tanh>} : tensor<2x8xbf16>
  return %0, %1 : tensor<2x8xbf16>, tensor<2x8xbf16>
}

// Tests that cast converts element types (f32 -> i64, i1 -> f16) keeping the shape.
// CHECK-LABEL: func.func @cast
// CHECK: cpc.cast %{{.*}} : tensor<2x3xf32> -> tensor<2x3xi64>
// CHECK: cpc.cast %{{.*}} : tensor<2x3xi1> -> tensor<2x3xf16>
func.func @cast(%x: tensor<2x3xf32>, %m: tensor<2x3xi1>) -> (tensor<2x3xi64>, tensor<2x3xf16>) {
  %0 = cpc.cast %x : tensor<2x3xf32> -> tensor<2x3xi64>
  %1 = cpc.cast %m : tensor<2x3xi1> -> tensor<2x3xf16>
  return %0, %1 : tensor<2x3xi64>, tensor<2x3xf16>
}

// Tests that arithmetic binary ops broadcast numpy-style, including rank-0 operands.
// CHECK-LABEL: func.func @binary
// CHECK: cpc.add %{{.*}}, %{{.*}} : (tensor<4x1x3xf32>, tensor<5x1xf32>) -> tensor<4x5x3xf32>
// CHECK: cpc.sub %{{.*}}, %{{.*}} : (tensor<4x5x3xf32>, tensor<f32>) -> tensor<4x5x3xf32>
// CHECK: cpc.mul %{{.*}}, %{{.*}} : (tensor<f32>, tensor<4x5x3xf32>) -> tensor<4x5x3xf32>
// CHECK: cpc.div %{{.*}}, %{{.*}} : (tensor<4x5x3xf32>, tensor<5x1xf32>) -> tensor<4x5x3xf32>
// CHECK: cpc.pow %{{.*}}, %{{.*}} : (tensor<4x5x3xf32>, tensor<f32>) -> tensor<4x5x3xf32>
// CHECK: cpc.max %{{.*}}, %{{.*}} : (tensor<4x5x3xf32>, tensor<4x1x3xf32>) -> tensor<4x5x3xf32>
// CHECK: cpc.min %{{.*}}, %{{.*}} : (tensor<4x5x3xf32>, tensor<f32>) -> tensor<4x5x3xf32>
func.func @binary(%a: tensor<4x1x3xf32>, %b: tensor<5x1xf32>, %s: tensor<f32>) -> tensor<4x5x3xf32> {
  %0 = cpc.add %a, %b : (tensor<4x1x3xf32>, tensor<5x1xf32>) -> tensor<4x5x3xf32>
  %1 = cpc.sub %0, %s : (tensor<4x5x3xf32>, tensor<f32>) -> tensor<4x5x3xf32>
  %2 = cpc.mul %s, %1 : (tensor<f32>, tensor<4x5x3xf32>) -> tensor<4x5x3xf32>
  %3 = cpc.div %2, %b : (tensor<4x5x3xf32>, tensor<5x1xf32>) -> tensor<4x5x3xf32>
  %4 = cpc.pow %3, %s : (tensor<4x5x3xf32>, tensor<f32>) -> tensor<4x5x3xf32>
  %5 = cpc.max %4, %a : (tensor<4x5x3xf32>, tensor<4x1x3xf32>) -> tensor<4x5x3xf32>
  %6 = cpc.min %5, %s : (tensor<4x5x3xf32>, tensor<f32>) -> tensor<4x5x3xf32>
  return %6 : tensor<4x5x3xf32>
}

// Tests that integer binary ops broadcast both operands (3 and 2x1 -> 2x3).
// CHECK-LABEL: func.func @binary_int
// CHECK: cpc.div %{{.*}}, %{{.*}} : (tensor<3xi64>, tensor<2x1xi64>) -> tensor<2x3xi64>
// CHECK: cpc.add %{{.*}}, %{{.*}} : (tensor<2x3xi64>, tensor<i64>) -> tensor<2x3xi64>
func.func @binary_int(%a: tensor<3xi64>, %b: tensor<2x1xi64>, %c: tensor<i64>) -> tensor<2x3xi64> {
  %0 = cpc.div %a, %b : (tensor<3xi64>, tensor<2x1xi64>) -> tensor<2x3xi64>
  %1 = cpc.add %0, %c : (tensor<2x3xi64>, tensor<i64>) -> tensor<2x3xi64>
  return %1 : tensor<2x3xi64>
}

// Tests that comparisons broadcast and return i1 tensors, for float and integer operands.
// CHECK-LABEL: func.func @compare
// CHECK: cpc.equal %{{.*}}, %{{.*}} : (tensor<2x3xi64>, tensor<i64>) -> tensor<2x3xi1>
// CHECK: cpc.less %{{.*}}, %{{.*}} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
// CHECK: cpc.less_equal %{{.*}}, %{{.*}} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
// CHECK: cpc.greater %{{.*}}, %{{.*}} : (tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xi1>
// CHECK: cpc.greater_equal %{{.*}}, %{{.*}} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xi1>
func.func @compare(%a: tensor<2x3xf32>, %b: tensor<3xf32>, %i: tensor<2x3xi64>, %j: tensor<i64>)
    -> (tensor<2x3xi1>, tensor<2x3xi1>, tensor<2x3xi1>, tensor<2x3xi1>, tensor<2x3xi1>) {
  %0 = cpc.equal %i, %j : (tensor<2x3xi64>, tensor<i64>) -> tensor<2x3xi1>
  %1 = cpc.less %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  %2 = cpc.less_equal %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  %3 = cpc.greater %b, %a : (tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xi1>
  %4 = cpc.greater_equal %a, %a : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xi1>
  return %0, %1, %2, %3, %4 : tensor<2x3xi1>, tensor<2x3xi1>, tensor<2x3xi1>, tensor<2x3xi1>, tensor<2x3xi1>
}

// Tests that logical and / or broadcast over i1 tensors and not keeps the type.
// CHECK-LABEL: func.func @logic
// CHECK: %[[AND:.*]] = cpc.and %{{.*}}, %{{.*}} : (tensor<2x3xi1>, tensor<3xi1>) -> tensor<2x3xi1>
// CHECK: %[[OR:.*]] = cpc.or %[[AND]], %{{.*}} : (tensor<2x3xi1>, tensor<2x3xi1>) -> tensor<2x3xi1>
// CHECK: cpc.not %[[OR]] : tensor<2x3xi1>
func.func @logic(%a: tensor<2x3xi1>, %b: tensor<3xi1>) -> tensor<2x3xi1> {
  %0 = cpc.and %a, %b : (tensor<2x3xi1>, tensor<3xi1>) -> tensor<2x3xi1>
  %1 = cpc.or %0, %a : (tensor<2x3xi1>, tensor<2x3xi1>) -> tensor<2x3xi1>
  %2 = cpc.not %1 : tensor<2x3xi1>
  return %2 : tensor<2x3xi1>
}

// Tests that where broadcasts condition and both branches together.
// CHECK-LABEL: func.func @where
// CHECK: cpc.where %{{.*}}, %{{.*}}, %{{.*}} : (tensor<2x1xi1>, tensor<3xf32>, tensor<f32>) -> tensor<2x3xf32>
func.func @where(%c: tensor<2x1xi1>, %a: tensor<3xf32>, %b: tensor<f32>) -> tensor<2x3xf32> {
  %0 = cpc.where %c, %a, %b : (tensor<2x1xi1>, tensor<3xf32>, tensor<f32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

//===----------------------------------------------------------------------===//
// Contractions, reductions, normalizations.

// Tests that matmul broadcasts batch dims and handles rank-1 operands as numpy does.
// CHECK-LABEL: func.func @matmul
// CHECK: cpc.matmul %{{.*}}, %{{.*}} : (tensor<2x1x3x4xf32>, tensor<5x4x6xf32>) -> tensor<2x5x3x6xf32>
// CHECK: cpc.matmul %{{.*}}, %{{.*}} : (tensor<4xf32>, tensor<7x4x6xf32>) -> tensor<7x6xf32>
// CHECK: cpc.matmul %{{.*}}, %{{.*}} : (tensor<7x3x4xf32>, tensor<4xf32>) -> tensor<7x3xf32>
// CHECK: cpc.matmul %{{.*}}, %{{.*}} : (tensor<4xf32>, tensor<4xf32>) -> tensor<f32>
// CHECK: cpc.matmul %{{.*}}, %{{.*}} : (tensor<196x768xbf16>, tensor<768x3072xbf16>) -> tensor<196x3072xbf16>
func.func @matmul(%a: tensor<2x1x3x4xf32>, %b: tensor<5x4x6xf32>, %v: tensor<4xf32>,
                  %m: tensor<7x4x6xf32>, %n: tensor<7x3x4xf32>,
                  %x: tensor<196x768xbf16>, %w: tensor<768x3072xbf16>)
    -> (tensor<2x5x3x6xf32>, tensor<7x6xf32>, tensor<7x3xf32>, tensor<f32>, tensor<196x3072xbf16>) {
  %0 = cpc.matmul %a, %b : (tensor<2x1x3x4xf32>, tensor<5x4x6xf32>) -> tensor<2x5x3x6xf32>
  %1 = cpc.matmul %v, %m : (tensor<4xf32>, tensor<7x4x6xf32>) -> tensor<7x6xf32>
  %2 = cpc.matmul %n, %v : (tensor<7x3x4xf32>, tensor<4xf32>) -> tensor<7x3xf32>
  %3 = cpc.matmul %v, %v : (tensor<4xf32>, tensor<4xf32>) -> tensor<f32>
  %4 = cpc.matmul %x, %w : (tensor<196x768xbf16>, tensor<768x3072xbf16>) -> tensor<196x3072xbf16>
  return %0, %1, %2, %3, %4 : tensor<2x5x3x6xf32>, tensor<7x6xf32>, tensor<7x3xf32>, tensor<f32>, tensor<196x3072xbf16>
}

// Tests that every reduction round-trips with keepdims true and false (false is the
// default and is elided), including a full reduction to rank 0.
// CHECK-LABEL: func.func @reduce
// CHECK: cpc.reduce_sum %{{.*}} {axes = array<i64: 1, 2>, keepdims = true} : tensor<2x3x4xf32> -> tensor<2x1x1xf32>
// CHECK: cpc.reduce_mean %{{.*}} {axes = array<i64: 0, 2>} : tensor<2x3x4xf32> -> tensor<3xf32>
// CHECK: cpc.reduce_max %{{.*}} {axes = array<i64: 2>, keepdims = true} : tensor<2x3x4xi32> -> tensor<2x3x1xi32>
// CHECK: cpc.reduce_min %{{.*}} {axes = array<i64: 0>} : tensor<2x3x4xi32> -> tensor<3x4xi32>
// CHECK: cpc.reduce_prod %{{.*}} {axes = array<i64: 0, 1, 2>} : tensor<2x3x4xf32> -> tensor<f32>
func.func @reduce(%x: tensor<2x3x4xf32>, %i: tensor<2x3x4xi32>)
    -> (tensor<2x1x1xf32>, tensor<3xf32>, tensor<2x3x1xi32>, tensor<3x4xi32>, tensor<f32>) {
  %0 = cpc.reduce_sum %x {axes = array<i64: 1, 2>, keepdims = true} : tensor<2x3x4xf32> -> tensor<2x1x1xf32>
  %1 = cpc.reduce_mean %x {axes = array<i64: 0, 2>} : tensor<2x3x4xf32> -> tensor<3xf32>
  %2 = cpc.reduce_max %i {axes = array<i64: 2>, keepdims = true} : tensor<2x3x4xi32> -> tensor<2x3x1xi32>
  %3 = cpc.reduce_min %i {axes = array<i64: 0>, keepdims = false} : tensor<2x3x4xi32> -> tensor<3x4xi32>
  %4 = cpc.reduce_prod %x {axes = array<i64: 0, 1, 2>} : tensor<2x3x4xf32> -> tensor<f32>
  return %0, %1, %2, %3, %4 : tensor<2x1x1xf32>, tensor<3xf32>, tensor<2x3x1xi32>, tensor<3x4xi32>, tensor<f32>
}

// Tests that layer_norm normalizes over the last dim or over several trailing dims.
// CHECK-LABEL: func.func @layer_norm
// CHECK: cpc.layer_norm %{{.*}}, %{{.*}}, %{{.*}} {axis = 2 : i64, epsilon = 9.9999999999999995E-7 : f64} : (tensor<8x16x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<8x16x32xf32>
// CHECK: cpc.layer_norm %{{.*}}, %{{.*}}, %{{.*}} {axis = 1 : i64, epsilon = 1.000000e-05 : f64} : (tensor<8x16x32xf32>, tensor<16x32xf32>, tensor<16x32xf32>) -> tensor<8x16x32xf32>
func.func @layer_norm(%x: tensor<8x16x32xf32>, %g: tensor<32xf32>, %b: tensor<32xf32>, %g2: tensor<16x32xf32>)
    -> (tensor<8x16x32xf32>, tensor<8x16x32xf32>) {
  %0 = cpc.layer_norm %x, %g, %b {axis = 2 : i64, epsilon = 1.0e-06 : f64} : (tensor<8x16x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<8x16x32xf32>
  %1 = cpc.layer_norm %x, %g2, %g2 {axis = 1 : i64, epsilon = 1.0e-05 : f64} : (tensor<8x16x32xf32>, tensor<16x32xf32>, tensor<16x32xf32>) -> tensor<8x16x32xf32>
  return %0, %1 : tensor<8x16x32xf32>, tensor<8x16x32xf32>
}

// Tests that softmax keeps its axis (attention scores over keys).
// CHECK-LABEL: func.func @softmax
// CHECK: cpc.softmax %{{.*}} {axis = 3 : i64} : tensor<2x4x16x16xf32>
func.func @softmax(%x: tensor<2x4x16x16xf32>) -> tensor<2x4x16x16xf32> {
  %0 = cpc.softmax %x {axis = 3 : i64} : tensor<2x4x16x16xf32>
  return %0 : tensor<2x4x16x16xf32>
}

// Tests that conv2d round-trips with a bias (ViT patch embedding) and without one
// (padded, strided, grouped).
// CHECK-LABEL: func.func @conv2d
// CHECK: cpc.conv2d %{{.*}}, %{{.*}}, %{{.*}} {dilations = array<i64: 1, 1>, padding = array<i64: 0, 0, 0, 0>, strides = array<i64: 16, 16>} : (tensor<2x3x224x224xf32>, tensor<768x3x16x16xf32>, tensor<768xf32>) -> tensor<2x768x14x14xf32>
// CHECK: cpc.conv2d %{{[^,]*}}, %{{[^,]*}} {dilations = array<i64: 1, 1>, groups = 4 : i64, padding = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<1x8x10x10xf32>, tensor<8x2x3x3xf32>) -> tensor<1x8x5x5xf32>
func.func @conv2d(%x: tensor<2x3x224x224xf32>, %w: tensor<768x3x16x16xf32>, %b: tensor<768xf32>,
                  %y: tensor<1x8x10x10xf32>, %w2: tensor<8x2x3x3xf32>)
    -> (tensor<2x768x14x14xf32>, tensor<1x8x5x5xf32>) {
  %0 = cpc.conv2d %x, %w, %b {strides = array<i64: 16, 16>, padding = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<2x3x224x224xf32>, tensor<768x3x16x16xf32>, tensor<768xf32>) -> tensor<2x768x14x14xf32>
  %1 = cpc.conv2d %y, %w2 {strides = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 4 : i64} : (tensor<1x8x10x10xf32>, tensor<8x2x3x3xf32>) -> tensor<1x8x5x5xf32>
  return %0, %1 : tensor<2x768x14x14xf32>, tensor<1x8x5x5xf32>
}

//===----------------------------------------------------------------------===//
// Data movement.

// Tests that reshape splits heads (same element count, new shape).
// CHECK-LABEL: func.func @reshape
// CHECK: cpc.reshape %{{.*}} : tensor<2x196x768xf32> -> tensor<2x196x12x64xf32>
// CHECK: cpc.reshape %{{.*}} : tensor<1xi64> -> tensor<i64>
func.func @reshape(%x: tensor<2x196x768xf32>, %s: tensor<1xi64>) -> (tensor<2x196x12x64xf32>, tensor<i64>) {
  %0 = cpc.reshape %x : tensor<2x196x768xf32> -> tensor<2x196x12x64xf32>
  %1 = cpc.reshape %s : tensor<1xi64> -> tensor<i64>
  return %0, %1 : tensor<2x196x12x64xf32>, tensor<i64>
}

// Tests that transpose permutes dims.
// CHECK-LABEL: func.func @transpose
// CHECK: cpc.transpose %{{.*}} {permutation = array<i64: 0, 2, 1, 3>} : tensor<2x196x12x64xf32> -> tensor<2x12x196x64xf32>
func.func @transpose(%x: tensor<2x196x12x64xf32>) -> tensor<2x12x196x64xf32> {
  %0 = cpc.transpose %x {permutation = array<i64: 0, 2, 1, 3>} : tensor<2x196x12x64xf32> -> tensor<2x12x196x64xf32>
  return %0 : tensor<2x12x196x64xf32>
}

// Tests that slice supports strides (ceil((limit - start) / stride) elements) and
// drops the class token.
// CHECK-LABEL: func.func @slice
// CHECK: cpc.slice %{{.*}} {limits = array<i64: 2, 196, 768>, starts = array<i64: 0, 1, 0>, strides = array<i64: 1, 4, 2>} : tensor<2x196x768xf32> -> tensor<2x49x384xf32>
// CHECK: cpc.slice %{{.*}} {limits = array<i64: 2, 197, 768>, starts = array<i64: 0, 1, 0>, strides = array<i64: 1, 1, 1>} : tensor<2x197x768xf32> -> tensor<2x196x768xf32>
func.func @slice(%x: tensor<2x196x768xf32>, %y: tensor<2x197x768xf32>) -> (tensor<2x49x384xf32>, tensor<2x196x768xf32>) {
  %0 = cpc.slice %x {starts = array<i64: 0, 1, 0>, limits = array<i64: 2, 196, 768>, strides = array<i64: 1, 4, 2>} : tensor<2x196x768xf32> -> tensor<2x49x384xf32>
  %1 = cpc.slice %y {starts = array<i64: 0, 1, 0>, limits = array<i64: 2, 197, 768>, strides = array<i64: 1, 1, 1>} : tensor<2x197x768xf32> -> tensor<2x196x768xf32>
  return %0, %1 : tensor<2x49x384xf32>, tensor<2x196x768xf32>
}

// Tests that concat joins inputs along an axis (prepending the class token; three inputs).
// CHECK-LABEL: func.func @concat
// CHECK: cpc.concat %{{.*}}, %{{.*}} {axis = 1 : i64} : (tensor<2x1x768xf32>, tensor<2x196x768xf32>) -> tensor<2x197x768xf32>
// CHECK: cpc.concat %{{.*}}, %{{.*}}, %{{.*}} {axis = 0 : i64} : (tensor<2xi64>, tensor<3xi64>, tensor<2xi64>) -> tensor<7xi64>
func.func @concat(%cls: tensor<2x1x768xf32>, %x: tensor<2x196x768xf32>, %a: tensor<2xi64>, %b: tensor<3xi64>)
    -> (tensor<2x197x768xf32>, tensor<7xi64>) {
  %0 = cpc.concat %cls, %x {axis = 1 : i64} : (tensor<2x1x768xf32>, tensor<2x196x768xf32>) -> tensor<2x197x768xf32>
  %1 = cpc.concat %a, %b, %a {axis = 0 : i64} : (tensor<2xi64>, tensor<3xi64>, tensor<2xi64>) -> tensor<7xi64>
  return %0, %1 : tensor<2x197x768xf32>, tensor<7xi64>
}

// Tests that broadcast adds leading dims and expands size-1 dims.
// CHECK-LABEL: func.func @broadcast
// CHECK: cpc.broadcast %{{.*}} : tensor<768xf32> -> tensor<4x2x196x768xf32>
// CHECK: cpc.broadcast %{{.*}} : tensor<1x1x768xf32> -> tensor<2x1x768xf32>
func.func @broadcast(%b: tensor<768xf32>, %cls: tensor<1x1x768xf32>) -> (tensor<4x2x196x768xf32>, tensor<2x1x768xf32>) {
  %0 = cpc.broadcast %b : tensor<768xf32> -> tensor<4x2x196x768xf32>
  %1 = cpc.broadcast %cls : tensor<1x1x768xf32> -> tensor<2x1x768xf32>
  return %0, %1 : tensor<4x2x196x768xf32>, tensor<2x1x768xf32>
}

// Tests that gather splices the indices shape in at the axis (embedding lookup with i64
// indices, and i32 indices along a middle axis).
// CHECK-LABEL: func.func @gather
// CHECK: cpc.gather %{{.*}}, %{{.*}} {axis = 0 : i64} : (tensor<1000x64xf32>, tensor<2x5xi64>) -> tensor<2x5x64xf32>
// CHECK: cpc.gather %{{.*}}, %{{.*}} {axis = 1 : i64} : (tensor<2x196x768xf32>, tensor<3xi32>) -> tensor<2x3x768xf32>
func.func @gather(%table: tensor<1000x64xf32>, %ids: tensor<2x5xi64>, %x: tensor<2x196x768xf32>, %i32: tensor<3xi32>)
    -> (tensor<2x5x64xf32>, tensor<2x3x768xf32>) {
  %0 = cpc.gather %table, %ids {axis = 0 : i64} : (tensor<1000x64xf32>, tensor<2x5xi64>) -> tensor<2x5x64xf32>
  %1 = cpc.gather %x, %i32 {axis = 1 : i64} : (tensor<2x196x768xf32>, tensor<3xi32>) -> tensor<2x3x768xf32>
  return %0, %1 : tensor<2x5x64xf32>, tensor<2x3x768xf32>
}

// Tests that gather_elements takes the shape of its indices (MAE keeping visible patches).
// CHECK-LABEL: func.func @gather_elements
// CHECK: cpc.gather_elements %{{.*}}, %{{.*}} {axis = 1 : i64} : (tensor<2x196x768xf32>, tensor<2x49x768xi64>) -> tensor<2x49x768xf32>
func.func @gather_elements(%x: tensor<2x196x768xf32>, %keep: tensor<2x49x768xi64>) -> tensor<2x49x768xf32> {
  %0 = cpc.gather_elements %x, %keep {axis = 1 : i64} : (tensor<2x196x768xf32>, tensor<2x49x768xi64>) -> tensor<2x49x768xf32>
  return %0 : tensor<2x49x768xf32>
}

// Tests that scatter_nd accepts element updates and slice updates, with the default and an
// explicit reduction.
// CHECK-LABEL: func.func @scatter_nd
// CHECK: cpc.scatter_nd %{{.*}}, %{{.*}}, %{{[^ ]*}} : (tensor<4x5x6xf32>, tensor<3x2xi64>, tensor<3x6xf32>) -> tensor<4x5x6xf32>
// CHECK: cpc.scatter_nd %{{.*}}, %{{.*}}, %{{.*}} {reduction = #cpc.scatter_reduction<add>} : (tensor<4x5x6xf32>, tensor<2x1xi64>, tensor<2x5x6xf32>) -> tensor<4x5x6xf32>
func.func @scatter_nd(%data: tensor<4x5x6xf32>, %idx: tensor<3x2xi64>, %upd: tensor<3x6xf32>,
                      %idx1: tensor<2x1xi64>, %upd1: tensor<2x5x6xf32>) -> (tensor<4x5x6xf32>, tensor<4x5x6xf32>) {
  %0 = cpc.scatter_nd %data, %idx, %upd : (tensor<4x5x6xf32>, tensor<3x2xi64>, tensor<3x6xf32>) -> tensor<4x5x6xf32>
  %1 = cpc.scatter_nd %data, %idx1, %upd1 {reduction = #cpc.scatter_reduction<add>} : (tensor<4x5x6xf32>, tensor<2x1xi64>, tensor<2x5x6xf32>) -> tensor<4x5x6xf32>
  return %0, %1 : tensor<4x5x6xf32>, tensor<4x5x6xf32>
}

// Tests that topk yields values and i64 indices, with default and explicit largest/sorted.
// CHECK-LABEL: func.func @topk
// CHECK: %{{.*}}, %{{.*}} = cpc.topk %{{.*}} {axis = 1 : i64, k = 49 : i64} : tensor<2x196xf32> -> tensor<2x49xf32>, tensor<2x49xi64>
// CHECK: %{{.*}}, %{{.*}} = cpc.topk %{{.*}} {axis = 0 : i64, k = 1 : i64, largest = false, sorted = false} : tensor<2x196xf32> -> tensor<1x196xf32>, tensor<1x196xi64>
func.func @topk(%x: tensor<2x196xf32>) -> (tensor<2x49xf32>, tensor<2x49xi64>, tensor<1x196xf32>, tensor<1x196xi64>) {
  %v, %i = cpc.topk %x {k = 49 : i64, axis = 1 : i64} : tensor<2x196xf32> -> tensor<2x49xf32>, tensor<2x49xi64>
  %v2, %i2 = cpc.topk %x {k = 1 : i64, axis = 0 : i64, largest = false, sorted = false} : tensor<2x196xf32> -> tensor<1x196xf32>, tensor<1x196xi64>
  return %v, %i, %v2, %i2 : tensor<2x49xf32>, tensor<2x49xi64>, tensor<1x196xf32>, tensor<1x196xi64>
}

// Tests that argsort returns i64 indices of the input's shape (MAE's random shuffle).
// CHECK-LABEL: func.func @argsort
// CHECK: cpc.argsort %{{.*}} {axis = 1 : i64} : tensor<2x196xf32> -> tensor<2x196xi64>
// CHECK: cpc.argsort %{{.*}} {axis = 0 : i64, descending = true} : tensor<5xi32> -> tensor<5xi64>
func.func @argsort(%noise: tensor<2x196xf32>, %k: tensor<5xi32>) -> (tensor<2x196xi64>, tensor<5xi64>) {
  %0 = cpc.argsort %noise {axis = 1 : i64} : tensor<2x196xf32> -> tensor<2x196xi64>
  %1 = cpc.argsort %k {axis = 0 : i64, descending = true} : tensor<5xi32> -> tensor<5xi64>
  return %0, %1 : tensor<2x196xi64>, tensor<5xi64>
}

//===----------------------------------------------------------------------===//
// Parallelism.

// Tests that shard annotations round-trip: data-parallel activations, a column-split weight
// that is a partial sum over dp and pp, a dim split over two mesh axes, a 1-d mesh, and a
// partial max with a propagation priority.
// CHECK-LABEL: func.func @shard
// CHECK: cpc.shard %{{.*}} to <@mesh, {{\[\[}}"dp"], [], []]> : tensor<8x196x768xf32>
// CHECK: cpc.shard %{{.*}} to <@mesh, {{\[\[}}], ["tp"]], partial = ["dp", "pp"]> : tensor<768x3072xf32>
// CHECK: cpc.shard %{{.*}} to <@mesh, {{\[\[}}"dp", "pp"], [], ["tp"]]> : tensor<8x196x768xf32>
// CHECK: cpc.shard %{{.*}} to <@ring, {{\[\[}}], []], partial = ["x"]> : tensor<768x3072xf32>
// CHECK: cpc.shard %{{.*}} to <@mesh, {{\[\[}}], ["tp"]], partial = ["dp"], reduction = max, priority = 2> : tensor<768x3072xf32>
func.func @shard(%x: tensor<8x196x768xf32>, %w: tensor<768x3072xf32>) -> (tensor<8x196x768xf32>, tensor<768x3072xf32>) {
  %0 = cpc.shard %x to <@mesh, [["dp"], [], []]> : tensor<8x196x768xf32>
  %1 = cpc.shard %w to <@mesh, [[], ["tp"]], partial = ["dp", "pp"]> : tensor<768x3072xf32>
  %2 = cpc.shard %0 to <@mesh, [["dp", "pp"], [], ["tp"]]> : tensor<8x196x768xf32>
  %3 = cpc.shard %1 to <@ring, [[], []], partial = ["x"]> : tensor<768x3072xf32>
  %4 = cpc.shard %w to <@mesh, [[], ["tp"]], partial = ["dp"], reduction = max, priority = 2> : tensor<768x3072xf32>
  return %2, %4 : tensor<8x196x768xf32>, tensor<768x3072xf32>
}

// Tests that reduce_scatter round-trips along dim 0 (no dim attribute) and along an inner dim.
// CHECK-LABEL: func.func @reduce_scatter
// CHECK: cpc.reduce_scatter %{{.*}} over @mesh ["tp"] : tensor<8x4xf32> -> tensor<2x4xf32>
// CHECK: cpc.reduce_scatter %{{.*}} over @mesh ["tp"] {dim = 1 : i64} : tensor<8x4xf32> -> tensor<8x1xf32>
func.func @reduce_scatter(%x: tensor<8x4xf32>) -> (tensor<2x4xf32>, tensor<8x1xf32>) {
  %0 = cpc.reduce_scatter %x over @mesh ["tp"] : tensor<8x4xf32> -> tensor<2x4xf32>
  %1 = cpc.reduce_scatter %x over @mesh ["tp"] {dim = 1 : i64} : tensor<8x4xf32> -> tensor<8x1xf32>
  return %0, %1 : tensor<2x4xf32>, tensor<8x1xf32>
}

// Tests that point-to-point ops round-trip: a stage sends to the rank at pp coordinate 1 and
// receives from 0, on numbered channels.
// CHECK-LABEL: func.func @send_recv
// CHECK: cpc.send %arg0 to @mesh ["pp" = 1] channel 3 : tensor<2x4xf32>
// CHECK: %{{.*}} = cpc.recv from @mesh ["pp" = 0] channel 4 : tensor<2x4xf32>
func.func @send_recv(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  cpc.send %x to @mesh ["pp" = 1] channel 3 : tensor<2x4xf32>
  %0 = cpc.recv from @mesh ["pp" = 0] channel 4 : tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// Tests that all_to_all round-trips: a split over tp moves from dim 0 to dim 1.
// CHECK-LABEL: func.func @all_to_all
// CHECK: cpc.all_to_all %{{.*}} over @mesh ["tp"] {concat_dim = 0 : i64, split_dim = 1 : i64} : tensor<2x8xf32> -> tensor<8x2xf32>
func.func @all_to_all(%x: tensor<2x8xf32>) -> tensor<8x2xf32> {
  %0 = cpc.all_to_all %x over @mesh ["tp"] {split_dim = 1 : i64, concat_dim = 0 : i64} : tensor<2x8xf32> -> tensor<8x2xf32>
  return %0 : tensor<8x2xf32>
}

// Tests that all_reduce round-trips with its default kind (sum, not printed), with kind max, and
// as a bucket of two values over two axes.
// CHECK-LABEL: func.func @all_reduce
// CHECK: cpc.all_reduce %{{.*}} over @mesh ["dp"] : tensor<3x4xf32>
// CHECK: cpc.all_reduce %{{.*}} over @mesh ["tp"] {kind = #cpc.reduction<max>} : tensor<3xf32>
// CHECK: cpc.all_reduce %{{.*}}, %{{.*}} over @mesh ["dp", "tp"] : tensor<3x4xf32>, tensor<3xf32>
func.func @all_reduce(%x: tensor<3x4xf32>, %m: tensor<3xf32>) -> (tensor<3x4xf32>, tensor<3xf32>) {
  %0 = cpc.all_reduce %x over @mesh ["dp"] {kind = #cpc.reduction<sum>} : tensor<3x4xf32>
  %1 = cpc.all_reduce %m over @mesh ["tp"] {kind = #cpc.reduction<max>} : tensor<3xf32>
  %2:2 = cpc.all_reduce %0, %1 over @mesh ["dp", "tp"] : tensor<3x4xf32>, tensor<3xf32>
  return %2#0, %2#1 : tensor<3x4xf32>, tensor<3xf32>
}

// Tests that all_gather round-trips along dim 0 (no dim attribute) and along an inner dim, over
// one axis and over two (blocks in the order of the axes).
// CHECK-LABEL: func.func @all_gather
// CHECK: cpc.all_gather %{{.*}} over @mesh ["dp"] : tensor<3x4xf32> -> tensor<6x4xf32>
// CHECK: cpc.all_gather %{{.*}} over @mesh ["tp"] {dim = 1 : i64} : tensor<6x4xf32> -> tensor<6x16xf32>
// CHECK: cpc.all_gather %{{.*}} over @mesh ["dp", "pp"] {dim = 1 : i64} : tensor<3x4xf32> -> tensor<3x16xf32>
func.func @all_gather(%x: tensor<3x4xf32>) -> (tensor<6x16xf32>, tensor<3x16xf32>) {
  %0 = cpc.all_gather %x over @mesh ["dp"] : tensor<3x4xf32> -> tensor<6x4xf32>
  %1 = cpc.all_gather %0 over @mesh ["tp"] {dim = 1 : i64} : tensor<6x4xf32> -> tensor<6x16xf32>
  %2 = cpc.all_gather %x over @mesh ["dp", "pp"] {dim = 1 : i64} : tensor<3x4xf32> -> tensor<3x16xf32>
  return %1, %2 : tensor<6x16xf32>, tensor<3x16xf32>
}

// Tests that attention and its gradient round-trip: queries != keys, Dv != D, rank 3 and 4.
// CHECK-LABEL: func.func @attention
// CHECK: %[[O:.*]], %[[P:.*]] = cpc.attention %{{.*}}, %{{.*}}, %{{.*}} {scale = 1.250000e-01 : f64} : (tensor<2x4x5x8xf32>, tensor<2x4x7x8xf32>, tensor<2x4x7x3xf32>) -> (tensor<2x4x5x3xf32>, tensor<2x4x5x7xf32>)
// CHECK: cpc.attention_grad %{{.*}}, %{{.*}}, %{{.*}}, %[[P]], %[[O]] {scale = 1.250000e-01 : f64}
// CHECK: cpc.attention %{{.*}} : (tensor<6x5x4xbf16>, tensor<6x5x4xbf16>, tensor<6x5x4xbf16>) -> (tensor<6x5x4xbf16>, tensor<6x5x5xbf16>)
func.func @attention(%q: tensor<2x4x5x8xf32>, %k: tensor<2x4x7x8xf32>, %v: tensor<2x4x7x3xf32>, %h: tensor<6x5x4xbf16>)
    -> (tensor<2x4x5x8xf32>, tensor<6x5x4xbf16>) {
  %o, %p = cpc.attention %q, %k, %v {scale = 0.125 : f64} : (tensor<2x4x5x8xf32>, tensor<2x4x7x8xf32>, tensor<2x4x7x3xf32>) -> (tensor<2x4x5x3xf32>, tensor<2x4x5x7xf32>)
  %dq, %dk, %dv = cpc.attention_grad %q, %k, %v, %p, %o {scale = 0.125 : f64} : (tensor<2x4x5x8xf32>, tensor<2x4x7x8xf32>, tensor<2x4x7x3xf32>, tensor<2x4x5x7xf32>, tensor<2x4x5x3xf32>) -> (tensor<2x4x5x8xf32>, tensor<2x4x7x8xf32>, tensor<2x4x7x3xf32>)
  %ho, %hp = cpc.attention %h, %h, %h {scale = 0.5 : f64} : (tensor<6x5x4xbf16>, tensor<6x5x4xbf16>, tensor<6x5x4xbf16>) -> (tensor<6x5x4xbf16>, tensor<6x5x5xbf16>)
  return %dq, %ho : tensor<2x4x5x8xf32>, tensor<6x5x4xbf16>
}

// Tests that token-major attention and its gradient round-trip: q [B, N, H, D], probabilities
// [B, H, N, M].
// CHECK-LABEL: func.func @attention_token_major
// CHECK: %[[O:.*]], %[[P:.*]] = cpc.attention %{{.*}}, %{{.*}}, %{{.*}} {layout = #cpc.attention_layout<bnhd>, scale = 1.250000e-01 : f64} : (tensor<2x5x4x8xf32>, tensor<2x7x4x8xf32>, tensor<2x7x4x3xf32>) -> (tensor<2x5x4x3xf32>, tensor<2x4x5x7xf32>)
// CHECK: cpc.attention_grad %{{.*}}, %{{.*}}, %{{.*}}, %[[P]], %[[O]] {layout = #cpc.attention_layout<bnhd>, scale = 1.250000e-01 : f64}
func.func @attention_token_major(%q: tensor<2x5x4x8xf32>, %k: tensor<2x7x4x8xf32>, %v: tensor<2x7x4x3xf32>) -> tensor<2x5x4x8xf32> {
  %o, %p = cpc.attention %q, %k, %v {layout = #cpc.attention_layout<bnhd>, scale = 0.125 : f64} : (tensor<2x5x4x8xf32>, tensor<2x7x4x8xf32>, tensor<2x7x4x3xf32>) -> (tensor<2x5x4x3xf32>, tensor<2x4x5x7xf32>)
  %dq, %dk, %dv = cpc.attention_grad %q, %k, %v, %p, %o {layout = #cpc.attention_layout<bnhd>, scale = 0.125 : f64} : (tensor<2x5x4x8xf32>, tensor<2x7x4x8xf32>, tensor<2x7x4x3xf32>, tensor<2x4x5x7xf32>, tensor<2x5x4x3xf32>) -> (tensor<2x5x4x8xf32>, tensor<2x7x4x8xf32>, tensor<2x7x4x3xf32>)
  return %dq : tensor<2x5x4x8xf32>
}

// Tests that the residual LayerNorm fusions round-trip.
// CHECK-LABEL: func.func @residual_norm
// CHECK: %{{.*}}, %{{.*}} = cpc.add_layer_norm %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {axis = 1 : i64, epsilon = 9.9999999999999995E-7 : f64} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>)
// CHECK: cpc.layer_norm_grad_add %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {axis = 1 : i64, epsilon = 1.000000e-05 : f64} : (tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
func.func @residual_norm(%x: tensor<4x8xf32>, %s: tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %sum, %n = cpc.add_layer_norm %x, %x, %s, %s {axis = 1 : i64, epsilon = 1.0e-6 : f64} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>)
  %dx, %ds, %db = cpc.layer_norm_grad_add %sum, %s, %n, %x {axis = 1 : i64, epsilon = 1.0e-5 : f64} : (tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  return %n, %dx : tensor<4x8xf32>, tensor<4x8xf32>
}

// Tests the fused optimizer forms: reduce_sum_squares (the norm's term) and AdamW with a
// grad_scale operand; AdamW without it prints as before.
// CHECK-LABEL: func.func @optimizer_fusions
// CHECK: cpc.reduce_sum_squares %{{.*}} {axes = array<i64: 1>, keepdims = true} : tensor<4x6xf32> -> tensor<4x1xf32>
// CHECK: cpc.adamw %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} grad_scale %{{.*}} {
// CHECK: cpc.adamw %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {
func.func @optimizer_fusions(%g: tensor<4x6xf32>, %lr: tensor<f32>) -> (tensor<4x1xf32>, tensor<4x6xf32>, tensor<4x6xf32>) {
  %s = cpc.reduce_sum_squares %g {axes = array<i64: 1>, keepdims = true} : tensor<4x6xf32> -> tensor<4x1xf32>
  %p, %m, %v = cpc.adamw %g, %g, %g, %g, %lr, %lr grad_scale %lr {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decay = 0.0 : f64} : (tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<f32>, tensor<f32>, tensor<f32>) -> (tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>)
  %p2, %m2, %v2 = cpc.adamw %g, %g, %g, %g, %lr, %lr {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decay = 0.0 : f64} : (tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<f32>, tensor<f32>) -> (tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>)
  return %s, %p, %p2 : tensor<4x1xf32>, tensor<4x6xf32>, tensor<4x6xf32>
}
