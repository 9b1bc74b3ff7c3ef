// RUN: cpc-opt %s --split-input-file --cpc-mixed-precision='precision=bf16' | FileCheck %s
// RUN: cpc-opt %s --split-input-file --cpc-mixed-precision='precision=fp16' | FileCheck %s --check-prefix=F16
// RUN: cpc-opt %s --split-input-file --cpc-mixed-precision='precision=fp32' | FileCheck %s --check-prefix=F32
// RUN: not cpc-opt %s --split-input-file --cpc-mixed-precision='precision=int8' 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not cpc-opt %s --split-input-file --cpc-training-pipeline='precision=int8' 2>&1 | FileCheck %s --check-prefix=BAD

// Tests that a precision is one of the enum's cases (clEnumValN), named where parsed.
// BAD: for the --precision option: Cannot find option named 'int8'!

// Tests that a Linear computes in bf16: the f32 master weight and the input are cast once,
// right after their definitions, the bias (parameter-only) joins the 16-bit result without
// widening it, the GELU follows its 16-bit operand, the mean (a sum) computes in f32 and the
// loss keeps its declared f32 type.
// CHECK-LABEL: func.func @main
// CHECK: %[[X:.*]] = cpc.cast %arg0 : tensor<2x4xf32> -> tensor<2x4xbf16>
// CHECK: %[[W:.*]] = cpc.parameter @w : tensor<4x3xf32>
// CHECK-NEXT: %[[WL:.*]] = cpc.cast %[[W]] : tensor<4x3xf32> -> tensor<4x3xbf16>
// CHECK: %[[B:.*]] = cpc.parameter @b : tensor<3xf32>
// CHECK-NEXT: %[[BL:.*]] = cpc.cast %[[B]] : tensor<3xf32> -> tensor<3xbf16>
// CHECK: %[[Y:.*]] = cpc.matmul %[[X]], %[[WL]] : (tensor<2x4xbf16>, tensor<4x3xbf16>) -> tensor<2x3xbf16>
// CHECK: %[[YB:.*]] = cpc.add %[[Y]], %[[BL]] : (tensor<2x3xbf16>, tensor<3xbf16>) -> tensor<2x3xbf16>
// CHECK: %[[G:.*]] = cpc.gelu %[[YB]] : tensor<2x3xbf16>
// CHECK: %[[GW:.*]] = cpc.cast %[[G]] : tensor<2x3xbf16> -> tensor<2x3xf32>
// CHECK: cpc.reduce_mean %[[GW]] {{.*}} : tensor<2x3xf32> -> tensor<f32>
// CHECK-NOT: cpc.cast
// CHECK: return %{{.*}} : tensor<f32>
// F16-LABEL: func.func @main
// F16: cpc.matmul {{.*}} : (tensor<2x4xf16>, tensor<4x3xf16>) -> tensor<2x3xf16>
// F32-LABEL: func.func @main
// F32-NOT: cpc.cast
cpc.variable @w trainable : tensor<4x3xf32>
cpc.variable @b trainable : tensor<3xf32>
func.func @main(%x: tensor<2x4xf32> {cpc.name = "x"}) -> tensor<f32> {
  %w = cpc.parameter @w : tensor<4x3xf32>
  %b = cpc.parameter @b : tensor<3xf32>
  %y = cpc.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %yb = cpc.add %y, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %g = cpc.gelu %yb : tensor<2x3xf32>
  %l = cpc.reduce_mean %g {axes = array<i64: 0, 1>, keepdims = false} : tensor<2x3xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests that a weight read by two matmuls is cast once, that a softmax computes in f32 (its
// 16-bit operand widened), and that an elementwise op of a 16-bit and an f32 operand takes the
// widest type while a one-element constant does not widen it.
// CHECK-LABEL: func.func @main
// CHECK: cpc.parameter @w
// CHECK-NEXT: cpc.cast {{.*}} : tensor<4x4xf32> -> tensor<4x4xbf16>
// CHECK-NOT: tensor<4x4xf32> -> tensor<4x4xbf16>
// CHECK: %[[A:.*]] = cpc.matmul {{.*}} -> tensor<2x4xbf16>
// CHECK: %[[AS:.*]] = cpc.mul %[[A]], %{{.*}} : (tensor<2x4xbf16>, tensor<bf16>) -> tensor<2x4xbf16>
// CHECK: %[[AW:.*]] = cpc.cast %[[AS]] : tensor<2x4xbf16> -> tensor<2x4xf32>
// CHECK: cpc.softmax %[[AW]] {{.*}} : tensor<2x4xf32>
// CHECK: cpc.matmul {{.*}} -> tensor<2x4xbf16>
// CHECK: cpc.add {{.*}} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
cpc.variable @w trainable : tensor<4x4xf32>
func.func @main(%x: tensor<2x4xf32> {cpc.name = "x"}) -> tensor<f32> {
  %w = cpc.parameter @w : tensor<4x4xf32>
  %c = cpc.constant dense<0.5> : tensor<f32>
  %a = cpc.matmul %x, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %as = cpc.mul %a, %c : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x4xf32>
  %s = cpc.softmax %as {axis = 1 : i64} : tensor<2x4xf32>
  %b = cpc.matmul %s, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %sum = cpc.add %s, %b : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %l = cpc.reduce_sum %sum {axes = array<i64: 0, 1>, keepdims = false} : tensor<2x4xf32> -> tensor<f32>
  return %l : tensor<f32>
}
